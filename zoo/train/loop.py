"""The training engine every zoo job uses: Keras' own ``fit``, plus what a resumable run needs.

``fit(trainer, batches, output, ...)`` calls ``trainer.fit`` once per epoch (an interrupted epoch resumes at its
next step) with zoo's callbacks, and any of yours:

* ``EpochEnd``: the evaluator measures the model after each epoch; the best model by its primary metric -- the
  starting point (epoch 0) included -- is saved atomically as a zoo preset in ``OUTPUT/model``.
* ``StateCheckpoint``: the training state (``zoo.train.state``) every ``save_every`` steps and at each epoch end.
* ``ProgressBar``: examples/s and the running loss.

Ctrl-C (SIGINT) while steps run finishes the current step, saves the state at it and raises
``zoo.errors.TrainingInterrupted`` (a KeyboardInterrupt): rerunning the same command resumes at the next step. A
second Ctrl-C, or one outside the steps (loading, evaluating), interrupts at once; the state saved last stays.

Under data-parallel training (``zoo.distribute``) every process builds each global batch and feeds its share;
process 0 alone writes the state and the models, and the others wait for it where they read them.

Why not Keras' ``BackupAndRestore`` and ``ModelCheckpoint``: ``BackupAndRestore`` restarts an interrupted epoch
from its first batch and does not keep the dropout layers' random state, so the resumed run is not the run it
replaces; ``ModelCheckpoint`` saves the trainer (with its training head) rather than the model inside it, not
atomically, and cannot count the starting point as a candidate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import queue
import signal
import threading
import time

import keras
import numpy as np

from .. import distribute
from ..errors import ConfigError, TrainingInterrupted
from ..logs import log, progress
from ..paths import RUN_CHECKPOINT, RUN_MODEL
from .state import load_state, save_state


@dataclasses.dataclass
class Run:
    """What ``fit`` returns.

    :param history: per-epoch records (epoch 0 = before training).
    :param best: the best epoch's record (None without an evaluator).
    :param train_seconds: seconds spent training, over all resumed parts.
    :param model_dir: where the best model is (a preset folder).
    :param metric: the evaluator's primary metric.
    :param best_scores: the evaluator's scores of the best epoch, when measured in this process.
    """

    history: list
    best: dict | None
    train_seconds: float
    model_dir: str
    metric: str | None
    best_scores: object = None  # the evaluator's scores of the best epoch, when measured in this process

    @property
    def best_epoch(self):
        return None if self.best is None else self.best["epoch"]


_WATCHERS = []  # Keras callbacks that ``watching`` adds to every fit


@contextlib.contextmanager
def watching(*callbacks):
    """Inside the block every ``fit`` -- the ones inside a job's ``run`` too -- also runs these Keras callbacks; a
    callback's ``on_batch_data(step, inputs)``, if it has one, sees each batch's inputs as they are produced (e.g. a
    step timer that counts padded tokens: ``tools/gpu_run.py``)."""
    _WATCHERS.extend(callbacks)
    try:
        yield
    finally:
        del _WATCHERS[len(_WATCHERS) - len(callbacks):]


def metric_key(evaluator, name):
    return f"{evaluator.name}_{name}" if evaluator.name else name


def fit(trainer, batches, output, *, epochs, seed=42, evaluator=None, model=None, save_every=500,
        show_progress=True, unit="pair", callbacks=(), metadata=None):
    """Train the compiled ``trainer`` resumably, keeping the best model in ``OUTPUT/model``. Rerunning with the
    same ``output`` resumes from ``OUTPUT/checkpoint`` (written atomically) and ends where an uninterrupted run ends.

    ```python
    trainer = zoo.models.build_trainer(encoder, objective="cosent")
    trainer.compile(zoo.train.training_optimizer("adam", 2e-5), loss=zoo.losses.objective_loss("cosent"))
    batches = zoo.train.PairBatches(encoder.tokenizer, train, batch_size=64, maxlen=64)
    run = zoo.train.fit(trainer, batches, "runs/mine", epochs=1, evaluator=SpearmanEvaluator(valid), model=encoder)
    ```

    :param trainer: the compiled Keras model trained (e.g. ``zoo.models.build_trainer(encoder)``).
    :param batches: the batch source (``zoo.train.batches``, e.g. ``PairBatches``).
    :param output: the run folder.
    :param epochs: passes over ``batches``.
    :param seed: the seed of shuffling and dropout.
    :param evaluator: measures ``model`` after each epoch (and before the first); its primary metric picks the
        best epoch (None: the last one is kept).
    :param model: the model inside ``trainer`` that ``evaluator`` measures and whose ``save_to_preset`` writes
        the kept preset.
    :param save_every: optimizer steps between checkpoints.
    :param show_progress: a progress bar with its rate.
    :param unit: what the bar counts ("pair", "sent", ...).
    :param callbacks: more Keras callbacks.
    :param metadata: recorded in the kept preset's metadata.
    :returns: a ``Run``.
    """
    if epochs < 1 or save_every < 1:
        raise ConfigError(f"epochs and save_every must be >= 1, got {epochs} and {save_every}")
    if len(batches) == 0:
        raise ConfigError("no training batches (is the train split empty?)")
    os.makedirs(output, exist_ok=True)
    dist = distribute.current()
    state_dir, model_dir = os.path.join(output, RUN_CHECKPOINT), os.path.join(output, RUN_MODEL)
    metric = metric_key(evaluator, evaluator.primary_metric) if evaluator else None
    state = load_state(state_dir, trainer)
    fresh = state is None
    if not trainer.optimizer.built:  # here, not in the first traced step: creating variables there traces it twice
        trainer.optimizer.build(trainer.trainable_variables)
    if getattr(trainer.optimizer, "use_ema", False):
        # zoo calls fit once per epoch: Keras would put the moving averages into the weights at the end of each
        # call, and training would go on from them. Here the averages are what is evaluated and kept
        # (``averaged_weights``); training and its checkpoints keep the raw weights, and the averages, optimizer
        # variables, resume with them.
        trainer.optimizer.finalize_variable_values = lambda var_list: None
    if fresh:
        state = {"epoch": 0, "step": 0, "loss_sum": 0.0, "history": [], "best": None, "train_seconds": 0.0}
    elif state["epoch"] >= epochs:
        log.info("%s holds a finished run (%d epochs): nothing to train, its best model is evaluated again", output,
                 state["epoch"])
    else:
        log.info("resuming from %s: epoch %d, step %d", state_dir, state["epoch"] + 1, state["step"])
    end = EpochEnd(state, evaluator, model, model_dir, metadata, dist, trainer)
    if fresh and evaluator is not None:
        end.measure(0, None)  # the starting point is a candidate too
    for epoch in range(state["epoch"], epochs):
        start = state["step"]
        if start >= len(batches):  # killed after the epoch's last step was saved, before its evaluation
            end.on_epoch_end(epoch)
            save_training_state(state_dir, trainer, state, dist)
            continue
        sizes = {}
        data = epoch_input(batches, seed, epoch, start, sizes, dist)
        steps = len(batches) - start
        checkpoint = StateCheckpoint(state, state_dir, save_every, start, dist)
        zoo_callbacks = [ProgressBar(batches, epoch, epochs, start, sizes, unit, show_progress), checkpoint, end]
        with stop_on_sigint() as interrupt:
            checkpoint.interrupt = end.interrupt = interrupt
            trainer.fit(data, steps_per_epoch=steps, initial_epoch=epoch, epochs=epoch + 1, verbose=0,
                        shuffle=False, callbacks=[*zoo_callbacks, *callbacks, *_WATCHERS])
        if interrupt.is_set():
            raise TrainingInterrupted(output, epoch + 1, state["step"])
        save_training_state(state_dir, trainer, state, dist)
    if evaluator is None and not os.path.exists(model_dir) and model is not None:
        if dist.is_writer:
            with averaged_weights(trainer):
                model.save_to_preset(model_dir, metadata={**(metadata or {}), "epoch": state["epoch"]})
        distribute.barrier("zoo-final-model")
    return Run(state["history"], state["best"], state["train_seconds"], model_dir, metric, end.best_scores)


@contextlib.contextmanager
def stop_on_sigint():
    """Inside the block, a first Ctrl-C (SIGINT) sets the yielded event (the callbacks stop after the current
    step, saving it) instead of raising; a second one raises KeyboardInterrupt. Only in the main thread."""
    interrupt = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupt
        return

    def handler(signum, frame):
        if interrupt.is_set():
            raise KeyboardInterrupt
        interrupt.set()
        log.info("Ctrl-C: stopping after this step (press it again to stop at once)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)


def save_training_state(state_dir, trainer, state, dist):
    """``save_state`` by process 0; every process waits until it is written."""
    if dist.is_writer:
        save_state(state_dir, trainer, state)
    distribute.barrier("zoo-state")


def epoch_input(batches, seed, epoch, start, sizes, dist=None):
    """The rest of an epoch as Keras input, produced in a background thread that overlaps the training step:
    a ``tf.data`` pipeline (its shapes left open: every batch has its own length; with several replicas one
    element per replica, in turn) on TensorFlow, a prefetching generator elsewhere; each process feeds its share of
    every batch (``Distribution.shard``). ``sizes[step]`` gets the number of examples of each batch (for the
    progress bar)."""
    dist = dist or distribute.current()

    def produce():
        for step, x, y in batches.epoch(seed, epoch, start):
            sizes[step] = len(y)
            for watcher in _WATCHERS:
                if hasattr(watcher, "on_batch_data"):
                    watcher.on_batch_data(step, x)
            parts = dist.shard(x, y)
            if not parts:
                log.warning("epoch %d, step %d: %d examples cannot be split over %d devices; skipped", epoch + 1,
                            step + 1, len(y), dist.devices)
            yield from parts

    if keras.backend.backend() != "tensorflow":
        return prefetched(produce(), 2)
    import tensorflow as tf

    # each iteration of the dataset starts the epoch's rest afresh: Keras takes one element of an iterator of its
    # own to build the step under a tf.distribute strategy
    spec = keras.tree.map_structure(lambda a: tf.TensorSpec([None] * np.ndim(a), tf.as_dtype(np.asarray(a).dtype)),
                                    next(produce()))
    dataset = tf.data.Dataset.from_generator(produce, output_signature=spec).prefetch(2 * dist.devices)
    if dist.devices == 1:
        return dataset
    return tf.distribute.get_strategy().distribute_datasets_from_function(lambda context: dataset)


def prefetched(iterator, size):
    """Run ``iterator`` in a background thread, ``size`` items ahead; its exceptions reach the consumer."""
    items, done = queue.Queue(size), object()

    def work():
        try:
            for item in iterator:
                items.put(item)
        except BaseException as e:  # noqa: BLE001 (handed to the consumer)
            items.put(e)
        items.put(done)

    threading.Thread(target=work, name="zoo-batches", daemon=True).start()
    while (item := items.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item


class ProgressBar(keras.callbacks.Callback):
    """tqdm bar of examples/s and the running loss; raises FloatingPointError when the loss stops being finite.
    It never touches ``self.model``, which on JAX would sync the whole state every step."""

    def __init__(self, batches, epoch, epochs, start, sizes, unit, enabled):
        super().__init__()
        self.batches, self.epoch, self.start, self.sizes = batches, epoch, start, sizes
        per_step = batches.n / max(len(batches), 1)
        self.bar = progress(None, f"epoch {epoch + 1}/{epochs}", enabled, total=batches.n, unit=unit,
                            initial=min(int(start * per_step), batches.n))

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", 0.0))
        if not math.isfinite(loss):
            raise FloatingPointError(f"the training loss became {loss} at epoch {self.epoch + 1}, "
                                     f"step {self.start + batch + 1}")
        if self.bar is not None:  # a resumed epoch's count starts at an estimate: never past the epoch's size
            self.bar.update(min(self.sizes.pop(self.start + batch, 0), self.bar.total - self.bar.n))
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

    def on_epoch_end(self, epoch, logs=None):  # before the evaluation's own bars
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class StateCheckpoint(keras.callbacks.Callback):
    """Saves the training state every ``every`` steps (the epoch-end save follows the evaluation, in ``fit``), and
    keeps the state's position, loss sum and training seconds current."""

    def __init__(self, state, directory, every, start, dist):
        super().__init__()
        self.state, self.directory, self.every, self.start, self.dist = state, directory, every, start, dist
        self.base_loss, self.base_seconds, self.t0 = state["loss_sum"], state["train_seconds"], time.time()
        self.interrupt = threading.Event()  # set by Ctrl-C (``stop_on_sigint``)

    def record(self, step, logs):
        """Keras' loss is the mean over this fit call's steps (``start``..``step``)."""
        self.state["loss_sum"] = self.base_loss + float((logs or {}).get("loss", 0.0)) * (step - self.start)
        self.state["train_seconds"] = self.base_seconds + time.time() - self.t0
        self.state["step"] = step

    def on_train_batch_end(self, batch, logs=None):
        step = self.start + batch + 1
        if step % self.every == 0 or self.interrupt.is_set():
            self.record(step, logs)
            save_training_state(self.directory, self.model, self.state, self.dist)
        if self.interrupt.is_set():
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if not self.interrupt.is_set():  # Keras ends the epoch early on stop_training: it is not over
            self.record(self.start + self.params["steps"], logs)


@contextlib.contextmanager
def averaged_weights(trainer):
    """Within: the trainer's trainable variables hold its optimizer's moving averages (an optimizer built with
    ``use_ema``: ``--ema``), the weights an evaluation measures and a kept model holds; the raw weights come back
    after. Without ``use_ema``, nothing changes. (The optimizer's own lists, as Keras' SwapEMAWeights uses them.)"""
    optimizer = trainer.optimizer
    if not getattr(optimizer, "use_ema", False) or not optimizer.built or int(optimizer.iterations) == 0:
        yield  # before the first step the averages are not set yet (zeros): Keras starts them from the weights
        return
    pairs = [(v, a) for v, a in zip(optimizer._trainable_variables, optimizer._model_variables_moving_average)
             if a is not None]
    raw = [keras.ops.convert_to_numpy(v) for v, _ in pairs]
    for variable, average in pairs:
        variable.assign(average)
    try:
        yield
    finally:
        for (variable, _), value in zip(pairs, raw):
            variable.assign(value)


class EpochEnd(keras.callbacks.Callback):
    """After each epoch: measure with the evaluator (on the weights' moving averages under ``--ema``), record the
    epoch (metrics, mean training loss), save the best model, and move the state to the next epoch."""

    def __init__(self, state, evaluator, model, model_dir, metadata, dist, trainer=None):
        super().__init__()
        self.state, self.evaluator, self.target, self.dist = state, evaluator, model, dist
        self.trainer = trainer
        self.model_dir, self.metadata = model_dir, metadata or {}
        self.best_scores = None
        self.interrupt = threading.Event()

    def measure(self, epoch, train_loss):
        with averaged_weights(self.trainer if self.trainer is not None else self.model):
            return self._measure(epoch, train_loss)

    def _measure(self, epoch, train_loss):
        record = {"epoch": epoch}
        if self.evaluator is not None:
            metrics = self.evaluator(self.target)
            record.update({metric_key(self.evaluator, k): v for k, v in metrics.items()})
            value = metrics[self.evaluator.primary_metric]
            key = metric_key(self.evaluator, self.evaluator.primary_metric)
            best = self.state["best"]
            log.info("%s: %s %.2f", "before training" if epoch == 0 else f"epoch {epoch}", key, value)
            if self.evaluator.better(value, None if best is None else best[key]):
                if self.dist.is_writer:
                    self.target.save_to_preset(self.model_dir, metadata={**self.metadata, "epoch": epoch, key: value})
                distribute.barrier("zoo-best-model")
                self.state["best"] = {**record, "train_loss": train_loss}
                self.best_scores = getattr(self.evaluator, "scores", None)
        record["train_loss"] = train_loss
        self.state["history"].append(record)
        return record

    def on_epoch_end(self, epoch, logs=None):
        if self.interrupt.is_set():
            return
        steps = self.state["step"]
        train_loss = self.state["loss_sum"] / max(steps, 1)
        self.measure(epoch + 1, train_loss)
        self.state.update(epoch=epoch + 1, step=0, loss_sum=0.0)


class EvaluatorCallback(keras.callbacks.Callback):
    """An evaluator inside Keras' ``fit``: after each epoch ``logs["val_<primary metric>"]``, the best epoch
    remembered (``history``, ``best``, ``best_epoch``).

    ```python
    encoder.fit(..., callbacks=[zoo.train.EvaluatorCallback(SpearmanEvaluator(valid), encoder)])
    ```

    :param evaluator: an ``zoo.evaluation.Evaluator``.
    :param model: the model it measures.
    :param save_to: a preset folder where the best epoch's model is saved, atomically (None: not saved).
    :param restore_best: put the best epoch's weights back into ``model`` when training ends.
    :param verbose: log each epoch's value.
    """

    def __init__(self, evaluator, model, save_to=None, restore_best=True, verbose=True):
        super().__init__()
        self.evaluator, self.target = evaluator, model
        self.save_to, self.restore_best, self.verbose = save_to, restore_best, verbose
        self.best, self.best_epoch, self.best_weights, self.history = None, None, None, []

    def on_epoch_end(self, epoch, logs=None):
        metrics = self.evaluator(self.target)
        value = metrics[self.evaluator.primary_metric]
        self.history.append(value)
        if logs is not None:
            logs[f"val_{self.evaluator.primary_metric}"] = value
        if self.evaluator.better(value, self.best):
            self.best, self.best_epoch = value, epoch + 1
            self.best_weights = self.target.get_weights()
            if self.save_to:
                self.target.save_to_preset(self.save_to)
        if self.verbose:
            log.info("epoch %d: %s %s %.2f (best %.2f, epoch %d)", epoch + 1, self.evaluator.name,
                     self.evaluator.primary_metric, value, self.best, self.best_epoch)

    def on_train_end(self, logs=None):
        if self.restore_best and self.best_weights is not None:
            self.target.set_weights(self.best_weights)
