#!/usr/bin/python3
"""The PyTorch side of the qkv benchmark: the same model, the same initial
weights, the same token batch and the same training step as bench_train.

    /usr/bin/python3 bench/bench_torch.py --config tiny --threads 1 \
        --init tiny.safetensors --batch tiny.batch.safetensors --json

bench_train --save-init/--save-batch writes the two files (qkv parameter
names; token ids stored as F32). This script builds the model with
tests/pytorch/reference.py, the PyTorch definition of qkv's models that the
parity fixtures come from (PyTorch's own nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer, batch_first, dropout 0, norm_first as configured),
copies the qkv weights in through its Binding (qkv w_q/w_k/w_v = row blocks of
in_proj_weight, w_o = out_proj, cross_attn = multihead_attn) and times:

  step     optimizer.zero_grad(), forward, F.cross_entropy, backward,
           torch.optim.Adam step (lr 1e-3, the defaults qkv's Adam has too);
           median of --steps after --warmup untimed steps
  forward  forward + loss under torch.no_grad(), median of --steps

--autocast bf16 runs forward and loss under torch.autocast('cpu',
dtype=torch.bfloat16), as a PyTorch user on an AVX512-BF16 CPU would: the
products' operands in bfloat16, the weights, gradients and Adam's state float32
(the backward runs outside the context, as PyTorch's autocast documentation
says it should).

The model stays in train mode (dropout is 0, so the maths is the same as eval),
as in qkv; in eval mode PyTorch would switch its encoder layers to a fused
inference path that qkv's forward-only timing has no counterpart for.

--contend runs the same spinning load as bench_train --contend: a child
process pinned to the last CPU this process may use, from before the warm-up
steps to the end of the forward timing; it is killed then, and stops by
itself if this process dies (it watches its parent) or after --contend-limit
seconds.

One process per (configuration, thread setting): run.sh sets the environment
(OMP_WAIT_POLICY, OPENBLAS_NUM_THREADS) before Python starts, and peak RSS
(ru_maxrss) then belongs to this configuration alone.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pytorch"))

try:
    import numpy  # noqa: F401  (st.py needs it; fail here with a clear message)
    import torch
    import torch.nn.functional as F
except ImportError as e:  # a pyenv python3 may shadow /usr/bin/python3
    sys.exit(f"bench_torch.py needs Debian's python3-torch and python3-numpy "
             f"(run it with /usr/bin/python3): {e}")

import st  # noqa: E402  (tests/pytorch/st.py: safetensors without pip packages)
from reference import TorchGPT, TorchSeq2Seq  # noqa: E402  (tests/pytorch/reference.py)


# ---------------------------------------------------------------------------
# The model: tests/pytorch/reference.py, the PyTorch definition of qkv that
# the parity fixtures are made with, here in float32
# ---------------------------------------------------------------------------

def build_model(cfg):
    """TorchGPT or TorchSeq2Seq for bench_train's metadata (qkv's names)."""
    common = dict(d_model=cfg["d_model"], heads=cfg["heads"], d_ff=cfg["d_ff"],
                  activation=cfg["activation"], norm_first=cfg["norm_first"])
    if cfg["model"] == "gpt":
        return TorchGPT(dict(common, vocab=cfg["vocab"], max_len=cfg["seq_len"],
                             layers=cfg["layers"]))
    return TorchSeq2Seq(dict(common, src_vocab=cfg["vocab"], tgt_vocab=cfg["vocab"],
                             enc_layers=cfg["encoder_layers"],
                             dec_layers=cfg["decoder_layers"], tied=cfg["tied"]))


def config_from_metadata(meta):
    ints = ("batch", "seq_len", "d_model", "heads", "d_ff", "vocab", "layers",
            "encoder_layers", "decoder_layers")
    cfg = {k: (int(v) if k in ints else v) for k, v in meta.items()}
    cfg["norm_first"] = meta["norm_first"] == "true"
    cfg["tied"] = meta["tied"] == "true"
    return cfg


# ---------------------------------------------------------------------------
# A competing load
# ---------------------------------------------------------------------------

SPIN = """
import os, sys, time
parent, cpu, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
os.sched_setaffinity(0, {cpu})
end = time.monotonic() + limit
while os.getppid() == parent and time.monotonic() < end:
    for _ in range(200000):
        pass
"""


class Contender:
    """A child process that keeps one CPU busy while the with-block runs."""

    def __init__(self, limit_s):
        self.cpu = max(os.sched_getaffinity(0))
        self.limit_s = limit_s
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid()),
                                      str(self.cpu), str(self.limit_s)])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        return False


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="name, for the report")
    ap.add_argument("--init", required=True, help="initial weights from bench_train --save-init")
    ap.add_argument("--batch", required=True, help="tokens from bench_train --save-batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--setting", default="", help="label of the thread setting, for the report")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--contend", action="store_true",
                    help="time the steps while a spinning process keeps one core busy")
    ap.add_argument("--contend-limit", type=float, default=3600,
                    help="seconds after which the spinning process stops by itself")
    ap.add_argument("--time-limit", type=float, default=0,
                    help="stop the step timing after this many seconds (at least 3 steps), "
                         "and the forward timing likewise; 0: no limit")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    weights, meta = st.load_file(args.init)
    batch, _ = st.load_file(args.batch)
    cfg = config_from_metadata(meta)
    if cfg["config"] != args.config:
        sys.exit(f"bench_torch.py: {args.init} holds config {cfg['config']}, not {args.config}")

    model = build_model(cfg)
    # Every qkv tensor onto its PyTorch parameter, and every parameter covered.
    model.binding().load({k: torch.from_numpy(v) for k, v in weights.items()})
    model.train()  # dropout 0: same maths; see the module docstring

    src = torch.from_numpy(batch["src"]).long()
    tgt = torch.from_numpy(batch["tgt"]).long()
    targets = torch.from_numpy(batch["targets"]).long().reshape(-1)
    vocab = cfg["vocab"]

    def forward_loss():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            logits = model(tgt) if cfg["model"] == "gpt" else model(src, None, tgt, None)[0]
            return F.cross_entropy(logits.reshape(-1, vocab), targets)

    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # betas (0.9, 0.999), eps 1e-8

    def train_step():
        opt.zero_grad()
        loss = forward_loss()
        loss.backward()
        opt.step()
        return loss.item()

    def over_limit(times):
        return args.time_limit > 0 and len(times) >= 3 and sum(times) > args.time_limit

    def timed_runs():
        loss_first = loss_last = None
        for i in range(args.warmup):
            loss = train_step()
            if i == 0:
                loss_first = loss
        step_s = []
        for i in range(args.steps):
            t0 = time.perf_counter()
            loss_last = train_step()
            step_s.append(time.perf_counter() - t0)
            if loss_first is None:
                loss_first = loss_last
            if over_limit(step_s):
                break

        fwd_s = []
        with torch.no_grad():
            for _ in range(max(1, args.warmup)):
                forward_loss()
            for _ in range(args.steps):
                t0 = time.perf_counter()
                forward_loss().item()
                fwd_s.append(time.perf_counter() - t0)
                if over_limit(fwd_s):
                    break
        return loss_first, loss_last, step_s, fwd_s

    contend_cpu = -1
    if args.contend:
        with Contender(args.contend_limit) as c:
            contend_cpu = c.cpu
            loss_first, loss_last, step_s, fwd_s = timed_runs()
    else:
        loss_first, loss_last, step_s, fwd_s = timed_runs()

    step_ms = statistics.median(step_s) * 1e3
    tokens = cfg["batch"] * cfg["seq_len"]
    rec = {
        "impl": "torch", "config": args.config, "threads": args.threads,
        "precision": "bf16" if args.autocast == "bf16" else "fp32",
        "setting": args.setting or f"{args.threads} thread(s)",
        "env": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS",
                                           "OMP_NUM_THREADS") if k in os.environ},
        "torch_version": torch.__version__, "steps": len(step_s), "warmup": args.warmup,
        "contend": args.contend, "contend_cpu": contend_cpu,
        "params": sum(p.numel() for p in model.parameters()),
        "step_ms": step_ms, "step_ms_min": min(step_s) * 1e3,
        "fwd_ms": statistics.median(fwd_s) * 1e3,
        "tokens_per_s": tokens / (step_ms * 1e-3),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "loss_first": loss_first, "loss_last": loss_last,
    }
    if args.json:
        print(json.dumps(rec))
    else:
        print(f"torch {args.config}, {rec['setting']}: step {step_ms:.3f} ms "
              f"(min {rec['step_ms_min']:.3f}), forward {rec['fwd_ms']:.3f} ms, "
              f"{rec['tokens_per_s']:.0f} tokens/s, peak RSS {rec['peak_rss_mb']:.1f} MB, "
              f"loss {loss_first:.5f} -> {loss_last:.5f}")


if __name__ == "__main__":
    main()
