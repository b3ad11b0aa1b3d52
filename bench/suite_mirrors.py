"""mirrors (issue 45.1): one file from four mirror paths of the same server, with pieces.

256 MiB (64 MiB with --quick) from nginx's `/m1/` ... `/m4/` locations (the same file
each): Ferry `Download` with the first URL, the other three as `mirrors`, `pieces` of
1 MiB (every piece hashed as it completes) and `connections=4`, against
`aria2c -x4 -s4 -k1M` given the same four URLs (aria2c takes several URIs of one file as
mirrors; it checks no pieces without a Metalink). Medians of `--runs` alternating
rounds. Every output is checked against the source's sha256 outside the timing.
"""

import hashlib
import os

import harness as h
import wire

TARGET_VS_ARIA2 = 1.25  # ferry (pieces checked) <= 1.25 x aria2c (no piece checks)
PIECE = h.MIB


def piece_hashes(path):
    out = []
    with open(path, "rb") as f:
        while True:
            chunk = f.read(PIECE)
            if not chunk:
                return out
            out.append(hashlib.sha256(chunk).hexdigest())


def run(ctx, suite):
    mib = 64 if ctx.quick else 256
    runs = 2 if ctx.quick else ctx.args.runs
    name, path, digest = h.ensure_data_file(mib * h.MIB)
    hashes = piece_hashes(path)
    urls = [ctx.url(f"m{i}/{name}") for i in range(1, 5)]
    out_dir = os.path.join(h.OUT_DIR, "mirrors-dest")
    h.empty_dir(out_dir)

    ferryd, counter, conn = h.start_listening(ctx, "mirrors")
    session = h.open_session(conn, "org.ferry.bench.mirrors",
                             {"max-connections-per-host": wire.Variant("u", 16)})

    def ferry():
        out = os.path.join(out_dir, "ferry.bin")
        opts = h.download_options(destination=out, connections=4, overwrite=True)
        opts["mirrors"] = wire.Variant("as", urls[1:])
        opts["pieces"] = wire.Variant("(tas)", (PIECE, hashes))
        return h.bus_download_wall(conn, counter, session, urls[0], opts, "ferry with mirrors and pieces"), out

    def aria2():
        return h.aria2_wall(out_dir, 4, urls)

    def timed(what, fn):
        return h.checked_wall("mirrors", what, fn, digest)

    times = {"ferry": [], "aria2c": []}
    with h.bus_rounds(ferryd, conn, out_dir, "a download with mirrors"):
        h.warm_page_cache(path)
        for _ in range(runs):
            times["ferry"].append(timed(f"{mib} MiB from 4 mirrors, ferry mirrors+pieces, connections=4", ferry))
            times["aria2c"].append(timed(f"{mib} MiB from 4 mirrors, aria2c -x4 -s4 -k1M", aria2))

    ratio = h.median([f / a for f, a in zip(times["ferry"], times["aria2c"])])
    suite.data = {"bytes": mib * h.MIB, "piece_bytes": PIECE, "seconds": times, "ratio": ratio}
    m = h.median
    suite.row(f"{mib} MiB from 4 mirror paths: mirrors+pieces (1 MiB), connections=4 / aria2c -x4 -s4, same URLs",
              h.fmt_s(m(times["ferry"])), f"aria2c {h.fmt_s(m(times['aria2c']))}", ratio,
              f"<= {TARGET_VS_ARIA2}", ratio <= TARGET_VS_ARIA2)
