"""Evaluation throughput: the runner's evaluation pass against the same with one setting changed, side by side.

A run evaluates with bench.engine.train.evaluate: the model in eval mode over the recipe's val loader,
data.eval_batch images a batch (DALI or torchvision, as the run reads them). --against KEY.PATH=VALUE
(repeatable: data.eval_batch=2000, engine.channels_last=true, ...) builds the runner once more with that key
changed. Within every repeat the cases take turns, one whole pass over the val images each (--images: a fixed
subset, as eval.curve_images reads), in an order that rotates each repeat, so a shared machine's slow spell falls
on all of them alike; a first untimed pass each builds the loaders. Each --against's img/s over the recipe's is
paired within each repeat and printed with the sign test's interval of the median (bench perf train's:
MIN_PAIRS repeats or more reach 95%). Each case's Top-1 is printed beside it: a setting that changes speed only
gives the same Top-1 (up to an image whose logits tie at the kernels' rounding).
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from bench.engine.threads import resolve
from bench.errors import ArgumentParser, UserError, assignment, count, doc_summary
from bench.perf.train import MIN_PAIRS, against_ratio, parse_against


def measure(cases: dict, images: int | None, repeats: int) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """img/s of every case's evaluation pass in every repeat (order rotating each repeat), and each case's last
    result (bench.engine.train.evaluate's dict)."""
    from bench.engine.train import evaluate

    def one_pass(trainer) -> dict:
        return evaluate(trainer.model, trainer.data.val(images), trainer.recipe, trainer.device)

    results = {name: one_pass(trainer) for name, trainer in cases.items()}  # untimed: the loaders are built
    rates = {name: [] for name in cases}
    names = list(cases)
    for rep in range(repeats):
        turn = rep % len(names)
        for name in names[turn:] + names[:turn]:
            start = time.perf_counter()
            results[name] = one_pass(cases[name])
            rates[name].append(results[name]["images"] / (time.perf_counter() - start))
    return rates, results


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="bench perf eval", description=doc_summary(__doc__))
    parser.add_argument("recipe", help="a recipe file")
    parser.add_argument(
        "--set", action="append", default=[], type=assignment, metavar="KEY.PATH=VALUE", help="override a recipe key"
    )
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="also time the evaluation with this one key changed (repeatable; e.g. data.eval_batch=2000), and print "
        "its img/s over the recipe's, paired",
    )
    parser.add_argument("--images", type=count(1), help="val images a pass, a fixed subset (default: all)")
    parser.add_argument(
        "--threads", type=count(1), help="CPU threads (torch.set_num_threads); default: bench's auto (engine.threads)"
    )
    parser.add_argument(
        "--repeats", type=count(1), default=MIN_PAIRS, help=f"timed passes a case (default {MIN_PAIRS})"
    )
    args = parser.parse_args(argv)
    against = parse_against(args.against, "bench perf eval")
    from bench import recipe as recipes
    from bench.engine.distributed import Dist
    from bench.engine.train import Trainer

    torch.set_num_threads(args.threads or resolve("auto"))
    dist = Dist(0, 1, 0, torch.device("cpu"))
    cases = {}
    for override in [None, *against]:
        try:
            recipe = recipes.load(args.recipe, args.set + [override] * bool(override))
        except UserError as error:  # the recipe's own words name --set: name the flag given
            if override is None:
                raise
            raise UserError(
                f"bench perf eval --against {override!r}: {str(error).replace(f'--set {override!r}: ', '')}"
            ) from None
        cases[override or "bench"] = Trainer(recipe, dist)
    first = cases["bench"]
    print(
        f"bench perf eval: {first.recipe.model.name} at {first.recipe.data.image_size} px, "
        f"{first.data.val_size if args.images is None else min(args.images, first.data.val_size)} val images a pass "
        f"in batches of {first.recipe.data.eval_batch}, {first.recipe.engine.precision}"
        f"{', channels_last' if first.recipe.engine.channels_last else ''}, {first.data.loader} loader; cpu "
        f"({torch.get_num_threads()} thread{'s' * (torch.get_num_threads() != 1)}, load average {os.getloadavg()[0]:.1f}); 1 untimed + {args.repeats} "
        "timed passes a case\n"
    )
    rates, results = measure(cases, args.images, args.repeats)
    labels = {name: "the recipe" if name == "bench" else name for name in cases}
    width = max(len(label) for label in labels.values()) + 2
    print(f"{'case':<{width}}{'img/s':>9}{'Top-1':>8}")
    for name, label in labels.items():
        print(f"{label:<{width}}{statistics.median(rates[name]):>9.1f}{results[name]['top1']:>8.2f}")
    print()
    for override in against:
        print(against_ratio(rates, override))
    print(
        "\nimg/s: median over the repeats, each a whole pass over the val images; Top-1: the last pass's (untrained "
        "weights: the same model in every case, so a setting that changes speed only leaves it as it is)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
