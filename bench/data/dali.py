"""The DALI backend: the fast input pipeline, on the GPU when there is one.

The pipelines are short functions of DALI ops, after NVIDIA's ResNet-50 recipe
(DeepLearningExamples, image_classification/dali.py):

- training: decode fused with the random-resized crop (`decoders.image_slice`,
  ROI decoding: only the window is decoded, the same kernel that
  `decoders.image_random_crop` uses), resize to size x size, flip and
  normalise in one `crop_mirror_normalize`;
- validation: decode, resize the shorter side to size/0.875, centre crop,
  normalise.

Decoding runs on device "mixed" (nvJPEG, the rest on the GPU) when the data
goes to a GPU, and on "cpu" (libjpeg-turbo, `device_id=None`) when not.

Which images, and which crops: the host feeds them. An `external_source` gets,
per micro-batch, the file bytes of the samples `sampling.StepStream` assigns to
this rank, with the crop window and flip computed by `augment.train_crop` from
each sample's own seed. So DALI trains on exactly the images, in exactly the
order and with exactly the crops of the torchvision backend: the suite's epoch
semantics (global batch s = stream positions [s*B, (s+1)*B) whatever the world
size, epochs = images seen / N, every image once per epoch, resume at any
step, the last partial batch of an epoch filled from the next epoch) hold
unchanged, and the two backends differ only in their decoders and resize
kernels. Evaluation feeds each rank its `sampling.eval_shard`, so every
validation image is evaluated exactly once whatever the world size, with no
padding and no duplicates to discount.

The trade-off against `fn.readers.file(shard_id, num_shards, random_shuffle,
initial_fill, pad_last_batch)`: the reader's shuffle only mixes inside an
`initial_fill` buffer, its shards rotate per epoch unless `stick_to_shard`, a
padded last batch repeats images, and what each rank sees depends on the world
size; resuming mid-epoch is not possible. Feeding from the host costs one
Python file read and one header parse per image (tens of microseconds, on a
prefetch thread, off the training thread) and no more.

The iterator copies every batch out of DALI's buffers (they are only valid
until the next run) into torch tensors. Threads keep this off the training
thread: one prepares the host side, and a pipeline thread runs DALI and copies
out, each a couple of batches ahead, so the next batch is made while the model
computes. On the CPU two pipelines take batches in turn, because copying a
batch into fresh host memory (page faults, about 1 ms per 224 px image) would
otherwise leave DALI's threads idle; on a GPU one does. Unreadable files: the
header is parsed on the host; if DALI still fails on a batch, its images are
run one at a time to find the culprits, which are dropped and reported (see
images.py). Every other batch is unaffected.
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np
import torch
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.pytorch import feed_ndarray

from bench.data import augment, images
from bench.data.output import Options

PREFETCH = 2  # batches copied out ahead of the consumer
LOCK_TIMEOUT_S = 60


# ---- the pipelines ---------------------------------------------------------------------------


def _decoder_args(device: str) -> dict:
    args = dict(device=device, output_type=types.RGB, adjust_orientation=False)
    if device == "mixed":  # as the NVIDIA recipe: fixed scratch space, no reallocations
        args.update(device_memory_padding=211025920, host_memory_padding=140544512, jpeg_fancy_upsampling=True)
    return args


def _normalise(images, channels_last: bool, **crop):
    return fn.crop_mirror_normalize(
        images,
        dtype=types.FLOAT,
        output_layout="HWC" if channels_last else "CHW",
        mean=[255 * m for m in augment.MEAN],
        std=[255 * s for s in augment.STD],
        **crop,
    )


@pipeline_def
def train_pipeline(size: int, decode_device: str, channels_last: bool, pad_crop: bool = False):
    encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
    anchor = fn.external_source(name="anchor", dtype=types.FLOAT, ndim=1)  # (x, y)
    shape = fn.external_source(name="shape", dtype=types.FLOAT, ndim=1)  # (w, h)
    flip = fn.external_source(name="flip", dtype=types.INT32, ndim=0)
    slice_args = dict(axis_names="WH", normalized_anchor=False, normalized_shape=False)
    if pad_crop:  # the window reaches into the padding: decode whole, slice with black outside the image
        images = fn.decoders.image(encoded, **_decoder_args(decode_device))
        images = fn.slice(images, anchor, shape, out_of_bounds_policy="pad", fill_values=0, **slice_args)
    else:
        images = fn.decoders.image_slice(encoded, anchor, shape, **slice_args, **_decoder_args(decode_device))
    images = fn.resize(images, size=[size, size], interp_type=types.INTERP_LINEAR, antialias=True)
    return _normalise(images, channels_last, mirror=flip)


@pipeline_def
def eval_pipeline(size: int, decode_device: str, channels_last: bool):
    encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
    resize_x = fn.external_source(name="resize_x", dtype=types.FLOAT, ndim=0)
    resize_y = fn.external_source(name="resize_y", dtype=types.FLOAT, ndim=0)
    crop_x = fn.external_source(name="crop_x", dtype=types.FLOAT, ndim=0)
    crop_y = fn.external_source(name="crop_y", dtype=types.FLOAT, ndim=0)
    images = fn.decoders.image(encoded, **_decoder_args(decode_device))
    images = fn.resize(images, resize_x=resize_x, resize_y=resize_y, interp_type=types.INTERP_LINEAR, antialias=True)
    return _normalise(images, channels_last, crop=[size, size], crop_pos_x=crop_x, crop_pos_y=crop_y)


def _train_inputs(width: int, height: int, seed: int, opts: Options) -> dict:
    c = augment.train_window(seed, width, height, opts)
    return {
        "anchor": np.array([c.left, c.top], np.float32),
        "shape": np.array([c.width, c.height], np.float32),
        "flip": np.array(int(c.flip), np.int32),
    }


def _eval_inputs(width: int, height: int, seed: None, opts: Options) -> dict:
    g = augment.eval_geometry(width, height, opts.size, opts.augment)

    def position(offset, extent):  # crop_pos * (extent - size), rounded by DALI, is `offset`
        return np.array(offset / (extent - opts.size) if extent > opts.size else 0.5, np.float32)

    return {
        "resize_x": np.array(g.resize_width, np.float32),
        "resize_y": np.array(g.resize_height, np.float32),
        "crop_x": position(g.left, g.resize_width),
        "crop_y": position(g.top, g.resize_height),
    }


# ---- feeding and copying out -----------------------------------------------------------------


class _Sample(NamedTuple):
    path: str
    label: int
    inputs: dict


@dataclass
class Runner:
    """One built pipeline plus how to feed it; used by one thread at a time (`lock`)."""

    pipe: object
    files: Sequence[str]
    labels: Sequence[int]
    opts: Options
    make_inputs: Callable
    device: torch.device
    lock: threading.Lock

    def prepare(self, items: Iterable[tuple[int, int | None]], known_bad: set[str]) -> tuple[list[_Sample], list[str]]:
        """Host side of one batch: read the files, parse their headers, compute the crops."""
        good, bad = [], []
        for index, seed in items:
            path = self.files[index]
            if path in known_bad:
                bad.append(path)
                continue
            try:
                data, width, height = images.read_header(path)
            except images.UnreadableImage:
                bad.append(path)
                continue
            inputs = self.make_inputs(width, height, seed, self.opts)
            inputs["encoded"] = np.frombuffer(data, np.uint8)
            good.append(_Sample(path, self.labels[index], inputs))
        return good, bad

    def _run(self, samples: list[_Sample], stream) -> torch.Tensor:
        for name in samples[0].inputs:
            self.pipe.feed_input(name, [s.inputs[name] for s in samples])
        (out,) = self.pipe.run()
        return _copy_out(out.as_tensor(), self.opts, self.device, stream)

    def execute(self, prepared, stream) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        """(images, labels, unreadable paths) of one prepared batch."""
        samples, bad = prepared
        try:
            out = self._run(samples, stream) if samples else None
        except RuntimeError:  # a file the header check let through: find it, drop it
            kept = []
            for s in samples:
                try:
                    self._run([s], stream)
                    kept.append(s)
                except RuntimeError:
                    bad.append(s.path)
            samples = kept
            out = self._run(samples, stream) if samples else None
        if out is None:
            shape = (0, 3, self.opts.size, self.opts.size)
            out = self.opts.finish(torch.empty(shape, device=self.device))
        return out, torch.tensor([s.label for s in samples], dtype=torch.int64), bad


def _copy_out(tensor, opts: Options, device: torch.device, stream) -> torch.Tensor:
    """A torch copy of a dense DALI batch (N,C,H,W, or N,H,W,C for channels_last) in the options' dtype."""
    if device.type != "cuda":
        raw = torch.from_numpy(np.asarray(tensor))  # a view of DALI's buffer: copied below
        return opts.finish(raw.permute(0, 3, 1, 2) if opts.channels_last else raw, copy=True)
    with torch.cuda.stream(stream):
        raw = torch.empty(tuple(tensor.shape()), dtype=torch.float32, device=device)
        feed_ndarray(tensor, raw, cuda_stream=stream)
        out = opts.finish(raw.permute(0, 3, 1, 2) if opts.channels_last else raw)
    stream.synchronize()
    return out


def build(kind: str, files, labels, opts: Options, batch_size: int, device: torch.device) -> Runner:
    """A pipeline for `kind` ("train" or "eval") decoding on the GPU when `device` is CUDA."""
    cuda = device.type == "cuda"
    make = partial(train_pipeline, pad_crop=opts.augment == "pad_crop") if kind == "train" else eval_pipeline
    pipe = make(
        size=opts.size,
        decode_device="mixed" if cuda else "cpu",
        channels_last=opts.channels_last,
        batch_size=batch_size,
        num_threads=max(1, opts.workers),
        device_id=(device.index if device.index is not None else torch.cuda.current_device()) if cuda else None,
        prefetch_queue_depth=1,
    )
    pipe.build()
    return Runner(
        pipe, files, labels, opts, _train_inputs if kind == "train" else _eval_inputs, device, threading.Lock()
    )


_END = object()  # queue marker: no more items


def _put(q: queue.Queue, item, stop: threading.Event) -> bool:
    """Put `item` into `q`, waiting while it is full; False when `stop` came first."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            pass
    return False


def _queue_items(q: queue.Queue, stop: threading.Event) -> Iterator:
    """The items put into `q` up to `_END`; an exception put there is raised."""
    while not stop.is_set():
        try:
            item = q.get(timeout=0.1)
        except queue.Empty:
            continue
        if item is _END:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _background(produce: Iterator, stop: threading.Event, name: str, threads: list) -> Iterator:
    """Run the iterator `produce` on a thread (added to `threads`), PREFETCH items ahead; its
    exceptions re-raise here."""
    out: queue.Queue = queue.Queue(PREFETCH)

    def work():
        try:
            for item in produce:
                if not _put(out, item, stop):
                    return
            _put(out, _END, stop)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            _put(out, e, stop)
        finally:
            getattr(produce, "close", lambda: None)()  # runs its cleanup (a lane releases its pipeline)

    threads.append(threading.Thread(target=work, daemon=True, name=name))
    threads[-1].start()
    return _queue_items(out, stop)


def _prefetch(runners: list[Runner], batches: Iterable, unreadable: images.Unreadable, train: bool) -> Iterator:
    """Run `runners` over `batches`: one thread prepares the host side, and batch k goes to lane
    k % len(runners), each lane a thread with its own pipeline that runs DALI and copies out, so
    one lane's copy overlaps the other's decoding; every stage runs PREFETCH batches ahead.
    Batches come out in order; unreadable files are reported here, on the consumer's thread."""
    stop = threading.Event()
    inputs = [queue.Queue(PREFETCH) for _ in runners]

    def dispatch():
        k = 0
        try:
            for k, items in enumerate(batches):
                if not _put(inputs[k % len(runners)], runners[0].prepare(items, unreadable.files), stop):
                    return
            k += 1
            for i in range(len(runners)):
                _put(inputs[(k + i) % len(runners)], _END, stop)
        except BaseException as e:  # noqa: BLE001 - raised in order, by the lane the next batch was for
            _put(inputs[k % len(runners)], e, stop)

    def lane(runner: Runner, q: queue.Queue):
        stream = torch.cuda.Stream(runner.device) if runner.device.type == "cuda" else None
        if not runner.lock.acquire(timeout=LOCK_TIMEOUT_S):
            raise RuntimeError(
                "the DALI pipeline is still held by an earlier iterator that was neither finished "
                "nor dropped; close() it before asking for new batches"
            )
        try:
            for prepared in _queue_items(q, stop):
                yield runner.execute(prepared, stream)
        finally:
            runner.lock.release()

    threads = [threading.Thread(target=dispatch, daemon=True, name="dali-prepare")]
    threads[0].start()
    lanes = [_background(lane(r, q), stop, f"dali-run-{i}", threads) for i, (r, q) in enumerate(zip(runners, inputs))]
    try:
        for k in itertools.count():
            item = next(lanes[k % len(lanes)], None)
            if item is None:
                return
            batch, labels, bad = item
            unreadable.report(bad)
            if train:
                unreadable.check_not_empty(len(labels), bad)
            elif not len(labels):
                continue
            if batch.is_cuda:
                batch.record_stream(torch.cuda.current_stream(batch.device))
            yield batch, labels
    finally:
        stop.set()
        for thread in threads:  # none may still be inside DALI when the interpreter exits
            thread.join(timeout=60)


def lanes(device: torch.device) -> int:
    """Pipelines per iterator: two on the CPU, where copying a batch out (into fresh host memory)
    takes long enough to leave DALI's threads idle; one on a GPU, where it does not."""
    return 1 if device.type == "cuda" else 2


def build_lanes(kind: str, files, labels, opts: Options, batch_size: int, device: torch.device) -> list[Runner]:
    return [build(kind, files, labels, opts, batch_size, device) for _ in range(lanes(device))]


READS_FILES = True


def train(data, start_step: int, end_step: int) -> Iterator:
    """The loader protocol (bench/data/loaders.py); the training pipelines are built once per Data:
    DALI's buffers grow over the first batches."""
    if "dali_train" not in data.cache:
        split = data.layout.train
        data.cache["dali_train"] = build_lanes(
            "train", split.files, split.labels, data.opts, data.stream.micro_batch, data.device
        )
    return train_batches(data.cache["dali_train"], data.samples(start_step, end_step), data.unreadable)


def evaluation(data, split, index_batches: list[list[int]]) -> "EvalBatches":
    return EvalBatches(split.files, split.labels, data.opts, index_batches, data.unreadable, data.device)


def train_batches(
    runners: list[Runner], samples: Iterable[list[tuple[int, int]]], unreadable: images.Unreadable
) -> Iterator:
    """One (images, labels) per list of (index, augmentation seed) in `samples`; `runners` from
    `build_lanes("train", ...)`, reusable by later calls once this iterator is finished or dropped."""
    return _prefetch(runners, samples, unreadable, train=True)


class EvalBatches:
    """The evaluation batches of fixed index lists; iterable any number of times, pipeline kept."""

    def __init__(
        self,
        files,
        labels,
        opts: Options,
        index_batches: list[list[int]],
        unreadable: images.Unreadable,
        device: torch.device,
    ):
        self.batches = [[(i, None) for i in b] for b in index_batches]
        self.unreadable = unreadable
        size = max((len(b) for b in self.batches), default=1)
        self.runners = build_lanes("eval", files, labels, opts, size, device)

    def __iter__(self) -> Iterator:
        return _prefetch(self.runners, self.batches, self.unreadable, train=False)
