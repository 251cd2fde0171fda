#!/usr/bin/python3
"""What PyTorch's CPU autocast does in bfloat16, next to what qkv's --precision bf16 does.

    /usr/bin/python3 bench/autocast_dtypes.py

docs/precision.md ("PyTorch's CPU autocast") quotes this script's output.
Each line runs one op inside torch.autocast('cpu', dtype=torch.bfloat16) on
float32 tensors and prints the dtype it returns (or the error it raises):

  - a product (@, nn.Linear) returns bfloat16: its operands are rounded to
    bfloat16, summed in float32, and the sum is rounded to bfloat16 again;
  - softmax of that product returns bfloat16 (autocast does not move it to
    float32 on the CPU);
  - nn.LayerNorm (float32 weights) refuses the product's bfloat16 output;
    in a Transformer it reads a residual sum, float32 + bfloat16, which type
    promotion (not autocast) makes float32;
  - cross-entropy returns float32.

Then one attention row block, softmax(q k^T / sqrt(d)), against float64:
autocast's (a bfloat16 product, a bfloat16 softmax) and qkv's (bfloat16
operands, float32 sums, the product and the softmax kept in float32, which
is what core/blas.cpp's bf16 gemm and the float32 softmax compute).

Debian's python3-torch (1.13 on bookworm: `make fixtures` installs it) on
any x86-64 CPU; no qkv code.
"""

import torch


def dtype_of(f):
    try:
        return str(f().dtype).replace("torch.", "")
    except RuntimeError as e:
        return "refused: " + str(e).splitlines()[0]


def bf16(x):
    """x rounded to bfloat16, held as float32."""
    return x.bfloat16().float()


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, torch.autocast('cpu', dtype=torch.bfloat16), float32 inputs:")
    a, b = torch.randn(64, 256), torch.randn(256, 64)
    lin = torch.nn.Linear(256, 64)
    ln = torch.nn.LayerNorm(64)
    labels = torch.randint(0, 64, (64,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = lin(a)
        rows = [
            ("a @ b", lambda: a @ b),
            ("nn.Linear(a)", lambda: lin(a)),
            ("softmax(nn.Linear(a))", lambda: torch.softmax(y, -1)),
            ("softmax(a float32 tensor)", lambda: torch.softmax(a, -1)),
            ("nn.LayerNorm(nn.Linear(a))", lambda: ln(y)),
            ("nn.LayerNorm(a float32 tensor)", lambda: ln(a[:, :64])),
            ("a residual sum x + nn.Linear(a)", lambda: a[:, :64] + y),
            ("nn.LayerNorm(x + nn.Linear(a))", lambda: ln(a[:, :64] + y)),
            ("cross_entropy(nn.Linear(a), labels)",
             lambda: torch.nn.functional.cross_entropy(y, labels)),
        ]
        for name, f in rows:
            print(f"  {name:38s} -> {dtype_of(f)}")
        c = a @ b
    # The product's bfloat16 result is the float32 sum of the rounded
    # operands' products, rounded once more.
    same = (c == (bf16(a) @ bf16(b)).bfloat16()).float().mean().item()
    print(f"  a @ b == bfloat16(float32 sum of bfloat16 operands): {100 * same:.1f}% of elements")
    exact = a.double() @ b.double()
    for name, p in (("autocast (bfloat16 result)", c), ("qkv (float32 result)", bf16(a) @ bf16(b))):
        rel = ((p.double() - exact).abs() / exact.abs()).median().item()
        print(f"  a @ b, median relative error against float64, {name}: {rel:.1e}")

    # One attention block, (T, T) probabilities, against float64.
    T, d = 128, 64
    q, k = torch.randn(T, d), torch.randn(T, d)
    exact = torch.softmax(q.double() @ k.double().T / d ** 0.5, -1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = torch.softmax(q @ k.T / d ** 0.5, -1)
    qkv = torch.softmax((bf16(q) @ bf16(k).T) / d ** 0.5, -1)  # float32 product and softmax

    def err(p):
        return (p.double() - exact).abs().max().item()

    print(f"attention probabilities softmax(q k^T / sqrt(d)), T {T}, d {d}, max |error| against float64:")
    print(f"  autocast (bfloat16 product, bfloat16 softmax):     {err(autocast):.2e} ({autocast.dtype})")
    print(f"  qkv --precision bf16 (float32 product and softmax): {err(qkv):.2e} ({qkv.dtype})")


if __name__ == "__main__":
    main()
