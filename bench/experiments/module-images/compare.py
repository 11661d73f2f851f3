#!/usr/bin/env python3
"""Two shipped modules files compared, module by module (matched by their kernels' lowered names):
the images' sizes, raw and stored, the time to inflate them, and whether the machine code is the
same (every .text section of the cubin ELF, byte for byte). Needs no GPU.

  python3 bench/experiments/module-images/compare.py OLD.db NEW.db [--json OUT.json]

Written for the -lineinfo question (bench/results/2026-12-07h-module-images.md): the line tables
and the PTX text that -lineinfo adds are part of every image a process inflates and loads."""
import argparse, json, sqlite3, statistics, struct, sys, time, zlib

MAGIC = b"DFGNNZ1\x00"  # runtime/src/context.cpp: magic, 8-byte raw size, zlib stream


def raw_image(stored):
    if not stored.startswith(MAGIC):
        return stored
    return zlib.decompress(stored[len(MAGIC) + 8:])


def sections(elf):
    """name -> bytes of an ELF64 little-endian file's sections (NOBITS ones empty)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_off = heads[shstrndx][4]
    out = {}
    for name, kind, _, _, off, size, *_ in heads:
        end = elf.index(b"\0", names_off + name)
        label = elf[names_off + name:end].decode()
        out[label] = b"" if kind == 8 else elf[off:off + size]
    return out


def modules(path):
    """(kernels' lowered names, arch) -> stored image."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return {(names, arch): image for names, arch, image in db.execute("SELECT lowered_names, arch, image FROM modules")}


def inflate_ms(images, reps=5):
    best = []
    for stored in images:
        if not stored.startswith(MAGIC):
            best.append(0.0)
            continue
        body = stored[len(MAGIC) + 8:]
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            zlib.decompress(body)
            times.append(time.perf_counter() - t)
        best.append(min(times) * 1e3)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--json")
    a = ap.parse_args()
    old, new = modules(a.old), modules(a.new)
    common = sorted(set(old) & set(new))
    if not common:
        sys.exit("compare: no module of one file has the kernels of a module of the other")
    rows, text_same, debug_share = [], 0, []
    for names in common:
        ro, rn = raw_image(old[names]), raw_image(new[names])
        so, sn = sections(ro), sections(rn)
        texts_o = {k: v for k, v in so.items() if k.startswith(".text.")}
        texts_n = {k: v for k, v in sn.items() if k.startswith(".text.")}
        same = texts_o == texts_n and bool(texts_o)
        text_same += same
        debug = sum(len(v) for k, v in so.items() if "debug" in k)
        debug_share.append(debug / len(ro))
        rows.append({"kernels": len(json.loads(names[0])), "arch": names[1], "old_raw": len(ro), "new_raw": len(rn),
                     "old_stored": len(old[names]), "new_stored": len(new[names]), "text_same": same})
    t_old, t_new = inflate_ms([old[n] for n in common]), inflate_ms([new[n] for n in common])
    for r, to, tn in zip(rows, t_old, t_new):
        r["old_inflate_ms"], r["new_inflate_ms"] = to, tn
    med = lambda key: statistics.median(r[key] for r in rows)
    tot = lambda key: sum(r[key] for r in rows)
    summary = {
        "modules_old": len(old), "modules_new": len(new), "matched": len(common),
        "text_identical": text_same,
        "median_debug_share_old": statistics.median(debug_share),
        "raw_bytes": [tot("old_raw"), tot("new_raw")], "stored_bytes": [tot("old_stored"), tot("new_stored")],
        "median_raw": [med("old_raw"), med("new_raw")], "median_stored": [med("old_stored"), med("new_stored")],
        "inflate_ms_total": [tot("old_inflate_ms"), tot("new_inflate_ms")],
        "median_inflate_ms": [med("old_inflate_ms"), med("new_inflate_ms")],
        "median_inflate_ratio": statistics.median([r["new_inflate_ms"] / r["old_inflate_ms"] for r in rows
                                                   if r["old_inflate_ms"] > 0] or [float("nan")]),
    }
    print(f"modules: {len(old)} old, {len(new)} new, {len(common)} matched by their kernels")
    print(f"machine code (.text sections) identical: {text_same} of {len(common)}")
    print(f"debug sections in the old images: median {summary['median_debug_share_old']:.0%} of the raw image")
    for label, key in (("raw image", "raw_bytes"), ("stored (zlib)", "stored_bytes")):
        o, n = summary[key]
        print(f"{label:14s} total {o / 1e6:7.2f} MB -> {n / 1e6:7.2f} MB ({n / o:.2f}x)")
    o, n = summary["median_stored"]
    print(f"{'stored median':14s} {o / 1e3:7.1f} kB -> {n / 1e3:7.1f} kB")
    o, n = summary["median_inflate_ms"]
    print(f"inflate per module: median {o:.3f} ms -> {n:.3f} ms (median ratio {summary['median_inflate_ratio']:.2f}); "
          f"all {summary['inflate_ms_total'][0]:.0f} -> {summary['inflate_ms_total'][1]:.0f} ms (best of 5 each, this CPU)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "modules": rows}, f, indent=1)
    if text_same != len(common):
        sys.exit("compare: the machine code differs")


if __name__ == "__main__":
    main()
