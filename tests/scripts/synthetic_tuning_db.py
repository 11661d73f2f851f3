"""A synthetic tuning database for tests of tools/calibrate_nearest.py: graphs of three degree families with
fingerprints computed as runtime/src/fingerprint.cpp does, and candidate timings from a cost model in which each
family has its own best schedule. Only the tables and columns the script reads (db/src/schema.cpp's names)."""
import json
import math
import random
import sqlite3

SCHEDULES = ["subwarp:lanes=8", "subwarp:lanes=32", "block_row:warps=4", "hub_split:threshold=256"]


def fingerprint(degrees):
    n, e = len(degrees), sum(degrees)
    d = sorted(degrees)
    q = lambda num, den: float(d[max(1, (num * n + den - 1) // den) - 1])
    mean = e / n
    var = sum((x - mean) ** 2 for x in d) / n
    gini = sum((2 * (i + 1) - n - 1) * x for i, x in enumerate(d)) / (n * e)
    hist = [0.0] * 24
    for x in d:
        hist[min(x.bit_length(), 23)] += 1.0 / n
    top = d[-((n + 99) // 100):]
    return {"version": 1, "num_nodes": n, "num_edges": e, "mean_degree": mean, "max_degree": d[-1],
            "p50": q(1, 2), "p90": q(9, 10), "p99": q(99, 100), "p999": q(999, 1000), "cv": math.sqrt(var) / mean,
            "gini": gini, "hist": hist, "top1pct_edge_share": sum(top) / e,
            "hub_rows": [sum(1 for x in d if x >= (1 << (k + 6))) for k in range(10)]}


def family_degrees(family, rng):
    n = rng.randint(800, 3000)
    if family == "uniform":
        return [max(1, int(rng.gauss(4, 1.5))) for _ in range(n)]
    if family == "powerlaw":
        return [min(n - 1, int(2 * rng.paretovariate(1.6))) + 1 for _ in range(n)]
    return [rng.randint(8, 40) for _ in range(n)]  # "dense"


def cost(schedule, family, rng):
    base = {"uniform": [1.0, 1.6, 2.2, 1.3], "powerlaw": [2.5, 1.4, 1.2, 1.0], "dense": [2.0, 1.0, 1.1, 1.5]}
    return base[family][SCHEDULES.index(schedule)] * (1 + 0.01 * rng.random())


def make(path, graphs_per_family=6, seed=1):
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    con.executescript("""
CREATE TABLE fingerprints (id INTEGER PRIMARY KEY, hash TEXT, bucket_key TEXT, text TEXT);
CREATE TABLE results (id INTEGER PRIMARY KEY, env_class TEXT, template_hash TEXT, library_version TEXT,
  model INTEGER, dtype INTEGER, heads INTEGER, dim INTEGER, direction INTEGER, variant INTEGER,
  fingerprint_id INTEGER, schedule TEXT, default_schedule TEXT);
CREATE TABLE runs (id INTEGER PRIMARY KEY, uuid TEXT, result_id INTEGER, unix_time INTEGER);
CREATE TABLE candidate_stats (run_id INTEGER, schedule TEXT, solver_id INTEGER, count INTEGER, mean_ms REAL,
  m2 REAL, min_ms REAL, median_ms REAL);""")
    run = 0
    for fam in ("uniform", "powerlaw", "dense"):
        for g in range(graphs_per_family):
            fp = fingerprint(family_degrees(fam, rng))
            fid = con.execute("INSERT INTO fingerprints (hash, bucket_key, text) VALUES (?, '', ?)",
                              (f"{fam}{g:02d}", json.dumps(fp))).lastrowid
            for direction in (0, 1):
                times = {s: cost(s, fam, rng) * (1 + direction) for s in SCHEDULES}
                winner = min(times, key=times.get)
                rid = con.execute(
                    "INSERT INTO results (env_class, template_hash, library_version, model, dtype, heads, dim, "
                    "direction, variant, fingerprint_id, schedule, default_schedule) "
                    "VALUES ('H200', 't', '0.3.0', 2, 0, 1, 128, ?, 1, ?, ?, ?)",
                    (direction, fid, winner, SCHEDULES[1])).lastrowid
                run += 1
                con.execute("INSERT INTO runs VALUES (?, ?, ?, ?)", (run, f"{run:032x}", rid, 1000 + run))
                for i, (s, t) in enumerate(times.items()):
                    samples = [t * (1 + 0.004 * rng.random()) for _ in range(5)]
                    mean = sum(samples) / 5
                    m2 = sum((x - mean) ** 2 for x in samples)
                    con.execute("INSERT INTO candidate_stats VALUES (?, ?, ?, 5, ?, ?, ?, ?)",
                                (run, s, i, mean, m2, min(samples), sorted(samples)[2]))
    con.commit()
    con.close()
