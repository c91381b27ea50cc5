"""A toy training script that follows the examples/train.py contract, in pure Python (fast).

Linear regression by SGD with momentum on a fixed data set; the randomness is the
initial weights, the shuffle of each epoch and an input jitter, all from one
``random.Random`` stream whose state goes into the checkpoint. ``--bug`` plants a
defect for the tests of ``seeder verify``:

* ``resume-rng``: resume does not restore the RNG state (the seeder state).
* ``resume-momentum``: resume does not restore the optimizer state.
* ``ignore-seed``: ``--seed`` is ignored (every run is random).
* ``fixed-seed``: without ``--seed`` the seed is 0 (unseeded runs are identical).
* ``jitter``: a tiny nondeterministic error per step (like GPU atomics).
* ``crash``: exits 3 after the first epoch.
* ``mid-epoch-rng``: a checkpoint taken inside an epoch saves the RNG state of the
  epoch's start (a stale copy); checkpoints at epoch ends are exact. Only a
  mid-epoch resume diverges.

``--wait-unless-in NAME`` (for the interrupt test): a run whose working directory is not named
``NAME`` prints ``waiting`` after its first step and waits there until a signal ends it.
"""

import hashlib
import json
import os
import random
import signal
import sys
import tempfile

from verify_contract import contract_parser  # tests/scripts/, the script's own directory

N, BATCH = 64, 8


def data():
    r = random.Random(1234)  # the data set is fixed, not part of the experiment's randomness
    xs = [r.uniform(-1, 1) for _ in range(N)]
    return xs, [2.0 * x + 0.5 + r.gauss(0, 0.3) for x in xs]


def save(path, state):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def seed_of(a):
    """The seed the run uses: ``--seed``, or one drawn (0 under ``fixed-seed``) where it is ignored
    or absent."""
    if a.bug != "ignore-seed" and a.seed is not None:
        return a.seed
    if a.bug == "fixed-seed" and a.seed is None:
        return 0
    return int.from_bytes(os.urandom(8), "little")


class Run:
    """One run's state (weights, momentum, step, the RNG) and its training loop."""

    def __init__(self, a):
        self.a = a
        self.rng = random.Random(seed_of(a))
        self.w, self.b = self.rng.gauss(0, 1), self.rng.gauss(0, 1)
        self.vw = self.vb = 0.0
        self.epoch0, self.step, self.resume_order, self.resume_pos = 0, 0, None, 0
        self.ckpt = os.path.join(a.ckpt_dir, "last.pt") if a.ckpt_dir else None
        self.epoch_rng = None
        self.out = None

    def load(self):
        """Continue from the checkpoint where ``--resume`` asks and one exists (minus what a
        ``resume-*`` bug leaves out)."""
        if not (self.a.resume and self.ckpt and os.path.exists(self.ckpt)):
            return
        with open(self.ckpt) as fh:
            st = json.load(fh)
        self.w, self.b, self.epoch0, self.step = st["w"], st["b"], st["epoch"], st["step"]
        self.resume_order, self.resume_pos = st.get("order"), st.get("pos", 0)
        if self.a.bug != "resume-momentum":
            self.vw, self.vb = st["vw"], st["vb"]
        if self.a.bug != "resume-rng":
            s = st["rng"]
            self.rng.setstate((s[0], tuple(s[1]), s[2]))

    def checkpoint(self, epoch, order=None, pos=0):
        if not self.ckpt:
            return
        mid_epoch_bug = self.a.bug == "mid-epoch-rng" and order is not None
        state = self.epoch_rng if mid_epoch_bug else self.rng.getstate()
        weights = {"w": self.w, "b": self.b, "vw": self.vw, "vb": self.vb}
        position = {"epoch": epoch, "step": self.step, "rng": list(state), "order": order}
        save(self.ckpt, {**weights, **position, "pos": pos})

    def log(self, epoch, loss):
        """One step's loss: a DLLogger line on stdout (``--dll``) or a JSON line in the metrics."""
        if self.a.dll:
            record = {"type": "LOG", "step": [epoch, self.step], "data": {"train_loss": loss}}
            print("DLLL " + json.dumps(record), flush=True)
        elif self.out:
            self.out.write(json.dumps({"step": self.step, "epoch": epoch, "loss": loss}) + "\n")
            self.out.flush()

    def train_batch(self, batch, xs, ys):
        """One SGD step with momentum on ``batch``; its loss."""
        gw = gb = loss = 0.0
        for j in batch:
            x = xs[j] + self.rng.gauss(0, 0.1)
            err = self.w * x + self.b - ys[j]
            loss += err * err / len(batch)
            gw += 2 * err * x / len(batch)
            gb += 2 * err / len(batch)
        if self.a.bug == "jitter":
            gw += (int.from_bytes(os.urandom(2), "little") - 32768) * 1e-15
        self.vw, self.vb = 0.9 * self.vw + gw, 0.9 * self.vb + gb
        self.w, self.b = self.w - self.a.lr * self.vw, self.b - self.a.lr * self.vb
        return loss

    def epoch_order(self):
        """The epoch's order and first position: a mid-epoch checkpoint's, else a new shuffle."""
        if self.resume_order is not None:
            order, start, self.resume_order = self.resume_order, self.resume_pos, None
            return order, start
        order = list(range(N))
        self.rng.shuffle(order)
        return order, 0

    def wait_if_asked(self):
        """Under ``--wait-unless-in NAME``, outside a folder named ``NAME``: wait for a signal."""
        name = self.a.wait_unless_in
        if name is not None and os.path.basename(os.getcwd()) != name:
            print("waiting", flush=True)
            while True:
                signal.pause()

    def after_step(self, epoch, order, i):
        """Checkpoint where ``--ckpt-every-steps`` or ``--stop-after-steps`` asks; whether the run
        stops here."""
        a = self.a
        stop = a.stop_after_steps is not None and self.step >= a.stop_after_steps
        if (a.ckpt_every_steps and self.step % a.ckpt_every_steps == 0) or stop:
            if i + BATCH < N:
                self.checkpoint(epoch, order, i + BATCH)
            else:
                self.checkpoint(epoch + 1)
        return stop

    def train_epoch(self, epoch, xs, ys):
        """One epoch (or its rest); whether the run stops inside it."""
        order, start = self.epoch_order()
        self.epoch_rng = self.rng.getstate()
        for i in range(start, N, BATCH):
            loss = self.train_batch(order[i : i + BATCH], xs, ys)
            self.log(epoch, loss)
            self.step += 1
            self.wait_if_asked()
            if self.after_step(epoch, order, i):
                return True
        return False

    def train(self):
        """The epochs left; the exit status (3 for the planted crash)."""
        a = self.a
        xs, ys = data()
        for epoch in range(self.epoch0, a.epochs):
            if self.train_epoch(epoch, xs, ys):
                return 0
            self.checkpoint(epoch + 1)
            if a.bug == "crash":
                print("Traceback: planted crash after the first epoch", file=sys.stderr)
                return 3
            if a.stop_after_epochs is not None and epoch + 1 >= a.stop_after_epochs:
                return 0
        digest = hashlib.sha256(repr((self.w, self.b, self.vw, self.vb)).encode()).hexdigest()[:32]
        if self.out:
            self.out.write(
                json.dumps({"digest": digest, "epoch": a.epochs, "step": self.step - 1}) + "\n"
            )
            self.out.close()
        print(f"DIGEST {digest}")
        return 0


def main():
    p = contract_parser()
    p.add_argument("--ckpt-every-steps", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument(
        "--dll", action="store_true", help="log DLLogger lines to stdout instead of JSON lines"
    )
    p.add_argument("--bug", default="none")
    p.add_argument(
        "--wait-unless-in", default=None, help="wait for a signal unless run in this folder"
    )
    a = p.parse_args()
    print(f"pid {os.getpid()} cwd {os.getcwd()}", flush=True)
    run = Run(a)
    run.load()
    metrics = a.metrics or os.environ.get("SEEDER_METRICS")
    if metrics and not a.dll:
        run.out = open(metrics, "a")
    return run.train()


if __name__ == "__main__":
    sys.exit(main())
