"""One rank of the distributed-tuning tests (test_distributed.py starts one process per rank with
torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

    python distributed_worker.py CONFIG.json

CONFIG: graphs, out, work_dir, split, timeout_s, fake_tune (the dfgnn_fake_tune executable, the
injected measurer), gpus (the GPU name each rank pretends to be), die_after (rank -> number of
problems after which that rank exits abruptly, as a killed process would). Writes
work_dir/result-RANK.json: {"report": ...} or {"error": "..."}.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import dfgnn
from dfgnn.distributed import DistributedTuningError, tune_distributed


def main(config_path):
    cfg = json.loads(Path(config_path).read_text())
    rank = int(os.environ["RANK"])
    gpu = cfg["gpus"][rank]
    die_after = cfg.get("die_after", {}).get(str(rank))
    done = [0]

    def fake_measure(spec, op, direction, budget, database):
        if die_after is not None and done[0] >= die_after:
            os._exit(17)  # no cleanup, no goodbye: as a rank killed mid-tuning
        done[0] += 1
        proc = subprocess.run([cfg["fake_tune"], str(database), spec, op.model.name.lower(), op.dtype.name.lower(),
                               str(op.heads), str(op.dim), direction, gpu, str(1000 * rank + done[0])],
                              capture_output=True, text=True, check=True)
        return json.loads(proc.stdout)

    ops = [dfgnn.op(*o) for o in cfg["ops"]]
    result_path = Path(cfg["work_dir"]) / f"result-{rank}.json"
    try:
        report = tune_distributed(cfg["graphs"], ops, cfg["out"], cfg["work_dir"], directions=cfg["directions"],
                                  split=cfg["split"], measure=fake_measure, timeout_s=cfg["timeout_s"])
        result_path.write_text(json.dumps({"report": report}))
    except DistributedTuningError as e:
        result_path.write_text(json.dumps({"error": str(e)}))
        return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's teardown: gloo's worker threads can still be joinable while
    # Python finalises, and then abort the process ("terminate called without an active exception",
    # intermittently, after a clean destroy_process_group; pytorch/pytorch#179291 describes the race).
    # Everything this process reports is written and flushed by now.
    os._exit(0 if code is None else int(code))
