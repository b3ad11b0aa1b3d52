"""metalink: one file described by a Metalink 4 document, from four mirror paths.

nginx serves the file at /m1/NAME ... /m4/NAME (aliases of the same file,
unthrottled) and a .meta4 document naming them (priorities 1-4) with the file's size,
SHA-256 and 4 MiB sha-256 pieces. `ferry get --metalink URL -o OUT -x 4 --wait`
against `aria2c -x4 -s4 -k1M URL` (aria2c fetches the same document and follows it),
both with four connections, alternating, one untimed warm-up each; ratio is the
median of per-round ratios (ferry wall / aria2c wall). Both check every piece and
the whole file; every output is also checked against the source's sha256 outside the
timing.
"""

import hashlib
import os

import harness as h
from harness import BenchError

TARGET_VS_ARIA2 = 1.0  # ferry wall <= 1.0 x aria2c with the same Metalink
PIECE = 4 * h.MIB
MIRRORS = 4


def write_document(ctx, name, path, size, digest):
    """The .meta4 beside the data file (pieces hashed once, outside the timing)."""
    meta_name = f"{name}.meta4"
    meta_path = os.path.join(h.OUT_DIR, meta_name)
    pieces = []
    with open(path, "rb") as f:
        while chunk := f.read(PIECE):
            pieces.append(hashlib.sha256(chunk).hexdigest())
    urls = "\n".join(f'    <url priority="{i}">{ctx.url(f"m{i}/{name}")}</url>' for i in range(1, MIRRORS + 1))
    hashes = "\n".join(f"      <hash>{p}</hash>" for p in pieces)
    doc = f"""<?xml version="1.0" encoding="UTF-8"?>
<metalink xmlns="urn:ietf:params:xml:ns:metalink">
  <file name="{name}">
    <size>{size}</size>
    <hash type="sha-256">{digest}</hash>
    <pieces length="{PIECE}" type="sha-256">
{hashes}
    </pieces>
{urls}
  </file>
</metalink>
"""
    with open(meta_path, "w") as f:
        f.write(doc)
    return meta_name


def run(ctx, suite):
    size_mib = 64 if ctx.quick else 256
    runs = 2 if ctx.quick else ctx.args.runs
    warmup = 0 if ctx.quick else ctx.args.warmup
    name, data_path, digest = h.ensure_data_file(size_mib * h.MIB)
    size = size_mib * h.MIB
    meta_url = ctx.url(write_document(ctx, name, data_path, size, digest))
    out_dir = os.path.join(h.OUT_DIR, "metalink-dest")
    h.empty_dir(out_dir)
    ferry_out = os.path.join(out_dir, "ferry.bin")
    aria_out = os.path.join(out_dir, name)  # aria2c names it after the document

    ferryd = h.Ferryd(ctx, "metalink").start()
    conn = ctx.connect()
    ferryd.wait_answering(conn)
    h.warm_page_cache(data_path)

    walls = {"ferry": [], "aria2c": []}
    verified = set()
    try:
        for i in range(1 - warmup, runs + 1):
            for tool in ("aria2c", "ferry"):
                out = ferry_out if tool == "ferry" else aria_out
                for p in (out, out + ".aria2"):
                    if os.path.exists(p):
                        os.unlink(p)
                os.sync()
                if tool == "aria2c":
                    code, wall, _, _ = h.timed_run(["aria2c", "-x4", "-s4", "-k1M", "-d", out_dir, "--allow-overwrite=true",
                                                    "-q", "--console-log-level=error", "--summary-interval=0", meta_url])
                    if code != 0:
                        raise BenchError(f"aria2c exited {code}")
                else:
                    _, wall, _, _, _ = ctx.ferry("get", "--metalink", meta_url, "-o", out, "-x", "4", "--wait")
                    h.remove_all_transfers(conn)
                if not os.path.exists(out) or os.path.getsize(out) != size:
                    raise BenchError(f"{tool} run {i}: the output is missing or has the wrong size")
                if tool not in verified:
                    if h.sha256_file(out) != digest:
                        raise BenchError(f"{tool} run {i}: the downloaded file's sha256 differs from the source")
                    verified.add(tool)
                h.log(f"metalink {'run ' + str(i) if i >= 1 else 'warm-up'} {tool}: {wall:.3f} s")
                if i >= 1:
                    walls[tool].append(wall)
    finally:
        for p in (ferry_out, aria_out):
            if os.path.exists(p):
                os.unlink(p)
        conn.close()
        ferryd.stop()

    ratio = h.median([f / a for f, a in zip(walls["ferry"], walls["aria2c"])])
    suite.data = {"size_bytes": size, "mirrors": MIRRORS, "piece_bytes": PIECE, "wall_s": walls, "ratio": ratio}
    suite.row(f"{size_mib} MiB from {MIRRORS} mirrors: ferry get --metalink -x4 / aria2c -x4 (same .meta4)",
              h.fmt_s(h.median(walls["ferry"])), f"aria2c {h.fmt_s(h.median(walls['aria2c']))}",
              ratio, f"<= {TARGET_VS_ARIA2:.2f}", ratio <= TARGET_VS_ARIA2)
