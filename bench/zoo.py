"""The configuration zoo (bench/zoo.txt): the op shapes users run, as (model, heads, dim, dtype)."""
import pathlib

ZOO_FILE = pathlib.Path(__file__).resolve().with_name("zoo.txt")
MODELS = ("gat", "gatv2", "transformer", "agnn")
DTYPES = ("float32", "float16", "bfloat16")


def read_zoo(path=ZOO_FILE):
    """The zoo's entries in file order; a malformed line raises ValueError naming it."""
    out = []
    for number, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 4 or words[0] not in MODELS or words[3] not in DTYPES or not all(w.isdigit() for w in words[1:3]):
            raise ValueError(f"{path}:{number}: expected 'model heads dim dtype' "
                             f"(model in {MODELS}, dtype in {DTYPES}), got {line.strip()!r}")
        entry = (words[0], int(words[1]), int(words[2]), words[3])
        if entry in out:
            raise ValueError(f"{path}:{number}: {line.strip()!r} is listed twice")
        out.append(entry)
    return out


if __name__ == "__main__":  # one "model:H:D:dtype" per line, for shell scripts
    for model, heads, dim, dtype in read_zoo():
        print(f"{model}:{heads}:{dim}:{dtype}")
