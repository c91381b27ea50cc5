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
"""

import hashlib
import json
import os
import random
import sys
import tempfile
import time

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


def main():
    p = contract_parser()
    p.add_argument("--ckpt-every-steps", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument(
        "--dll", action="store_true", help="log DLLogger lines to stdout instead of JSON lines"
    )
    p.add_argument("--bug", default="none")
    p.add_argument(
        "--sleep", type=float, default=0.0, help="seconds per step (for interrupt tests)"
    )
    a = p.parse_args()
    print(f"pid {os.getpid()} cwd {os.getcwd()}", flush=True)

    seed = a.seed
    if a.bug == "ignore-seed" or seed is None:
        seed = (
            0
            if (a.bug == "fixed-seed" and a.seed is None)
            else int.from_bytes(os.urandom(8), "little")
        )
    rng = random.Random(seed)
    w, b = rng.gauss(0, 1), rng.gauss(0, 1)
    vw = vb = 0.0
    epoch0, step, resume_order, resume_pos = 0, 0, None, 0
    ckpt = os.path.join(a.ckpt_dir, "last.pt") if a.ckpt_dir else None
    if a.resume and ckpt and os.path.exists(ckpt):
        with open(ckpt) as fh:
            st = json.load(fh)
        w, b, epoch0, step = st["w"], st["b"], st["epoch"], st["step"]
        resume_order, resume_pos = st.get("order"), st.get("pos", 0)
        if a.bug != "resume-momentum":
            vw, vb = st["vw"], st["vb"]
        if a.bug != "resume-rng":
            s = st["rng"]
            rng.setstate((s[0], tuple(s[1]), s[2]))

    epoch_rng = None

    def checkpoint(epoch, order=None, pos=0):
        if ckpt:
            state = (
                epoch_rng if (a.bug == "mid-epoch-rng" and order is not None) else rng.getstate()
            )
            save(
                ckpt,
                {
                    "w": w,
                    "b": b,
                    "vw": vw,
                    "vb": vb,
                    "epoch": epoch,
                    "step": step,
                    "rng": list(state),
                    "order": order,
                    "pos": pos,
                },
            )

    out = None
    metrics = a.metrics or os.environ.get("SEEDER_METRICS")
    if metrics and not a.dll:
        out = open(metrics, "a")
    xs, ys = data()
    for epoch in range(epoch0, a.epochs):
        if resume_order is not None:  # continue a mid-epoch checkpoint
            order, start, resume_order = resume_order, resume_pos, None
        else:
            order, start = list(range(N)), 0
            rng.shuffle(order)
        epoch_rng = rng.getstate()
        for i in range(start, N, BATCH):
            batch = order[i : i + BATCH]
            gw = gb = loss = 0.0
            for j in batch:
                x = xs[j] + rng.gauss(0, 0.1)
                err = w * x + b - ys[j]
                loss += err * err / len(batch)
                gw += 2 * err * x / len(batch)
                gb += 2 * err / len(batch)
            if a.bug == "jitter":
                gw += (int.from_bytes(os.urandom(2), "little") - 32768) * 1e-15
            vw, vb = 0.9 * vw + gw, 0.9 * vb + gb
            w, b = w - a.lr * vw, b - a.lr * vb
            if a.dll:
                print(
                    "DLLL "
                    + json.dumps(
                        {"type": "LOG", "step": [epoch, step], "data": {"train_loss": loss}}
                    ),
                    flush=True,
                )
            elif out:
                out.write(json.dumps({"step": step, "epoch": epoch, "loss": loss}) + "\n")
                out.flush()
            step += 1
            if a.sleep:
                time.sleep(a.sleep)
            if (a.ckpt_every_steps and step % a.ckpt_every_steps == 0) or (
                a.stop_after_steps is not None and step >= a.stop_after_steps
            ):
                if i + BATCH < N:
                    checkpoint(epoch, order, i + BATCH)
                else:
                    checkpoint(epoch + 1)
            if a.stop_after_steps is not None and step >= a.stop_after_steps:
                return 0
        checkpoint(epoch + 1)
        if a.bug == "crash":
            print("Traceback: planted crash after the first epoch", file=sys.stderr)
            return 3
        if a.stop_after_epochs is not None and epoch + 1 >= a.stop_after_epochs:
            return 0
    digest = hashlib.sha256(repr((w, b, vw, vb)).encode()).hexdigest()[:32]
    if out:
        out.write(json.dumps({"digest": digest, "epoch": a.epochs, "step": step - 1}) + "\n")
        out.close()
    print(f"DIGEST {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
