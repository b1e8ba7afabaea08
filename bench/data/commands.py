"""`bench data ...`: dataset commands (generate, convert, check)."""

from __future__ import annotations

from pathlib import Path

from bench.errors import UserError


def cmd_synth(args) -> int:
    from pydantic import ValidationError

    from bench.data import synthetic
    from bench.recipe import describe_error

    try:
        spec = synthetic.SynthSpec(classes=args.classes, train_per_class=args.train_per_class,
                                   val_per_class=args.val_per_class, size=args.size, seed=args.seed)
    except ValidationError as e:
        raise UserError(f"bench data synth: {describe_error(e)}") from None
    out = Path(args.out)
    if out.exists():
        raise UserError(f"{out}: already exists; choose a new --out directory")
    synthetic.write_dataset(out, spec)
    n = spec.classes * (spec.train_per_class + spec.val_per_class)
    print(f"wrote {n} images in {spec.classes} classes to {out}")
    return 0


def add_parser(sub) -> None:
    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    s = data.add_parser("synth", help="write the generated ImageNet-layout dataset")
    s.add_argument("--out", required=True)
    s.add_argument("--classes", type=int, default=10)
    s.add_argument("--train-per-class", type=int, default=100)
    s.add_argument("--val-per-class", type=int, default=30)
    s.add_argument("--size", type=int, default=72)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_synth)
