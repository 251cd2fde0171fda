#!/usr/bin/env python3
"""Write image K of an IDX images file (MNIST's format, gzip or raw) as a PNG.

  python3 tools/idx_to_png.py /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz 0 out.png

Standard library only (gzip, struct, zlib): a gray 8-bit PNG of the image's
rows x cols, for `train --load runs/vit/model.safetensors --ask out.png`.
"""
import gzip
import struct
import sys
import zlib


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().split("\n")[2].strip())
    path, k, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            sys.exit(f"{path}: not an IDX images file (magic {magic:#x}, expected 0x803)")
        if not 0 <= k < n:
            sys.exit(f"{path}: has images 0..{n - 1}, not {k}")
        f.seek(16 + k * rows * cols)
        px = f.read(rows * cols)
    raw = b"".join(b"\0" + px[y * cols:(y + 1) * cols] for y in range(rows))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(out, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", cols, rows, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    main()
