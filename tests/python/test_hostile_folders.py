# SPDX-License-Identifier: MIT
"""Files from other people meeting the filesystem (issue 35): a planted plugin in the current
folder, part markers that name paths outside the output, model folders whose links lead out of
them, side JSON files that are FIFOs or huge, tensors held by two shards, calibration inputs
that are empty or out of the float range, and option values that do not fit float32 or int32.
Each case runs the installed `qsparse` tool (or QSPARSE_TOOL) and checks its exit status, its
message and what it left on disk."""

import json
import os
import re
import subprocess
import sysconfig

import numpy as np
import pytest

import qsparse as qs
from synth_model import write_model

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def run(tool, *args, cwd=None, env=None, timeout=120):
    return subprocess.run([tool, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


# ---- 1. the plugin search never looks in the current folder ---------------------------------


def test_doctor_never_loads_a_plugin_from_the_current_folder(tool, tmp_path):
    """`qsparse doctor` started by name from PATH inside a downloaded model folder that holds a
    libqsparse-cuda.so: the wheel's tool has the library linked in, so dladdr names the program
    as typed ("qsparse", no slash) and the search used to fall back to "." and load the file.
    It must look beside the library the tool runs (for the wheel: the package folder)."""
    folder = tmp_path / "model"
    folder.mkdir()
    planted = folder / "libqsparse-cuda.so"
    planted.write_bytes(b"\x7fELF\x02\x01\x01 planted by a model's uploader\n" + b"\0" * 64)
    bindir = os.path.dirname(os.path.realpath(tool))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("QS_PLUGIN_PATH", None)
    r = run(os.path.basename(tool), "doctor", "--json", cwd=folder, env=env)
    assert r.returncode == 0, r.stderr
    cuda = json.loads(r.stdout)["backends"]["cuda"]
    if cuda["available"]:  # a real plugin where the library looks: not the planted file
        assert cuda["message"] == ""
        return
    # "backend plugin PATH: CAUSE" (no such file, not loadable, no device, ...)
    m = re.match(r"backend plugin (/.*?/libqsparse-cuda\.so): ", cuda["message"])
    assert m, cuda["message"]
    looked = m.group(1)
    assert os.path.basename(looked) == "libqsparse-cuda.so"
    assert os.path.realpath(os.path.dirname(looked)) != os.path.realpath(folder), looked
    scripts = sysconfig.get_path("scripts")
    if scripts and os.path.realpath(bindir) == os.path.realpath(scripts) and \
            not os.environ.get("QSPARSE_LIB"):
        # the wheel's tool: the package folder, where pip put libqsparse.so and the plugin
        assert os.path.realpath(os.path.dirname(looked)) == \
            os.path.realpath(os.path.dirname(qs.__file__)), looked


# ---- 2. merge-index writes only inside its output folder ------------------------------------


def parts_of(tool, tmp_path, n=2):
    """A 2-shard model quantized in n parts; returns the part folders."""
    src = tmp_path / "m"
    write_model(src, layers=2, hidden=64, intermediate=128, vocab=100, shards=2, dtype="f32")
    dirs = []
    for i in range(n):
        d = tmp_path / f"part{i}"
        r = run(tool, "quantize", src, "-o", d, "--format", "nf4", "--shard", f"{i}/{n}", "-q")
        assert r.returncode == 0, r.stderr
        dirs.append(d)
    return dirs


def edit_marker(d, **changes):
    m = json.load(open(d / "qsparse-part.json"))
    m.update(changes)
    (d / "qsparse-part.json").write_text(json.dumps(m))


@pytest.mark.parametrize("bad", ["../../../escaped.safetensors", "/abs.safetensors", "..",
                                 "sub/x.safetensors", ""])
def test_merge_index_refuses_shard_names_that_leave_the_folder(tool, tmp_path, bad):
    """A marker naming ../../../x.safetensors made merge-index create that file (exit 0) and
    point the index there: every name is now checked before anything is written."""
    p0, p1 = parts_of(tool, tmp_path)
    good = json.load(open(p0 / "qsparse-part.json"))["input_shards"]
    if bad.startswith("../"):  # the part holds the file the name reaches from inside it
        os.rename(p0 / good[0], tmp_path / "escaped.safetensors")
    for d in (p0, p1):
        edit_marker(d, input_shards=[bad, good[1]])
    edit_marker(p0, shards=[bad])
    out = tmp_path / "deep" / "er" / "out"
    os.makedirs(out.parent)
    before = sorted(os.listdir(tmp_path))
    r = run(tool, "merge-index", out, p0, p1)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "not a plain file name" in r.stderr, r.stderr
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(out.parent) == []


def test_merge_index_refuses_duplicate_and_out_of_range_markers(tool, tmp_path):
    p0, p1 = parts_of(tool, tmp_path)
    m0 = json.load(open(p0 / "qsparse-part.json"))
    out = tmp_path / "out"
    # the same input shard twice
    for d in (p0, p1):
        edit_marker(d, input_shards=[m0["input_shards"][0]] * 2)
    r = run(tool, "merge-index", out, p0, p1)
    assert r.returncode == 1 and "names the input shard" in r.stderr and "twice" in r.stderr
    for d in (p0, p1):
        edit_marker(d, input_shards=m0["input_shards"])
    # a part number outside 0 ... parts - 1
    edit_marker(p1, part=7)
    r = run(tool, "merge-index", out, p0, p1)
    assert r.returncode == 1 and "part number outside" in r.stderr, r.stderr
    edit_marker(p1, part=-1)
    r = run(tool, "merge-index", out, p0, p1)
    assert r.returncode == 1 and "part number outside" in r.stderr, r.stderr
    edit_marker(p1, part=1)
    # a tensor held by two shards: part 1's shard gets one of part 0's tensors too
    s0 = p0 / m0["shards"][0]
    s1 = p1 / json.load(open(p1 / "qsparse-part.json"))["shards"][0]
    t0 = safetensors_numpy.load_file(str(s0))
    t1 = safetensors_numpy.load_file(str(s1))
    dup = sorted(t0)[0]
    t1[dup] = t0[dup]
    safetensors_numpy.save_file(t1, str(s1))
    r = run(tool, "merge-index", out, p0, p1)
    assert r.returncode == 1 and "held by two shards" in r.stderr and dup in r.stderr, r.stderr
    assert not out.exists()
    assert [f for f in os.listdir(tmp_path) if ".qsparse-tmp-" in f] == []


def test_merge_index_of_good_parts_still_works(tool, tmp_path):
    p0, p1 = parts_of(tool, tmp_path)
    r = run(tool, "merge-index", tmp_path / "out", p1, p0)
    assert r.returncode == 0, r.stderr
    assert "2 shards from 2 parts" in r.stdout


# ---- 3. copying a model folder never follows a link out of it -------------------------------


def small_folder(tmp_path, name="model"):
    d = tmp_path / name
    write_model(d, layers=1, hidden=64, intermediate=128, vocab=100, shards=1, dtype="f32")
    return d


@pytest.mark.parametrize("target", ["/proc/self/environ", "/etc", "outside.txt", "dangling"])
def test_links_out_of_the_folder_are_refused_by_name(tool, tmp_path, target):
    """A generation_config.json linking to /proc/self/environ put the process environment (an
    HF_TOKEN) into the output folder; a link to /etc started copying /etc."""
    d = small_folder(tmp_path)
    (tmp_path / "outside.txt").write_text("a private file beside the download")
    to = {"outside.txt": str(tmp_path / "outside.txt"),
          "dangling": str(tmp_path / "nothing-here")}.get(target, target)
    os.symlink(to, d / "generation_config.json")
    out = tmp_path / "out"
    env = dict(os.environ, HF_TOKEN="hf_secret_token_value")
    r = run(tool, "quantize", d, "-o", out, "--format", "nf4", "-q", env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "generation_config.json" in r.stderr and "not followed" in r.stderr, r.stderr
    assert "hf_secret_token_value" not in r.stderr
    assert not out.exists()
    assert [f for f in os.listdir(tmp_path) if ".qsparse-tmp-" in f] == []


def test_links_inside_the_folder_and_a_cache_snapshot_are_copied(tool, tmp_path):
    """Links to regular files inside the folder are copied as those files; a Hugging Face cache
    snapshot (REPO/snapshots/REV, files linking to ../../blobs/HASH) is read and copied as
    before, its files as regular files."""
    repo = tmp_path / "models--org--m"
    src = small_folder(tmp_path, "plain")
    snap = repo / "snapshots" / "0123abc"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(os.listdir(src))):
        blob = repo / "blobs" / f"hash{i}"
        os.rename(src / f, blob)
        os.symlink(os.path.join("..", "..", "blobs", f"hash{i}"), snap / f)
    (snap / "sub").mkdir()
    (repo / "blobs" / "hashx").write_text('{"pooling": true}')
    os.symlink(os.path.join("..", "..", "..", "blobs", "hashx"), snap / "sub" / "pool.json")
    os.symlink("sub/pool.json", snap / "alias.json")  # inside the folder
    out = tmp_path / "out"
    r = run(tool, "quantize", snap, "-o", out, "--format", "nf4", "-q")
    assert r.returncode == 0, r.stderr
    for name in ("alias.json", os.path.join("sub", "pool.json"), "tokenizer_config.json"):
        p = out / name
        assert p.is_file() and not p.is_symlink(), name
    assert (out / "alias.json").read_text() == '{"pooling": true}'
    # a link to a folder inside is not followed either (it could loop)
    os.symlink(".", snap / "loop")
    r = run(tool, "quantize", snap, "-o", tmp_path / "out2", "--format", "nf4", "-q")
    assert r.returncode == 1 and "loop" in r.stderr and "not followed" in r.stderr, r.stderr


def test_a_shard_or_config_linking_out_is_refused(tool, tmp_path):
    d = small_folder(tmp_path)
    elsewhere = small_folder(tmp_path, "elsewhere")
    shard = "model-00001-of-00001.safetensors"
    os.remove(d / shard)
    os.symlink(elsewhere / shard, d / shard)
    r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nf4", "-q")
    assert r.returncode == 1 and shard in r.stderr and "out of the model folder" in r.stderr
    os.remove(d / shard)
    os.symlink(os.path.join("..", "elsewhere", shard), d / shard)
    os.remove(d / "config.json")
    os.symlink("/proc/self/environ", d / "config.json")
    r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nf4", "-q")
    assert r.returncode == 1 and "config.json" in r.stderr and "not followed" in r.stderr


# ---- 4. calibration data: empty, or at the edge of the float range ---------------------------


def calib_case(tmp_path, calib):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 64)) * 0.05).astype(np.float32)
    safetensors_numpy.save_file({"l.weight": w}, str(tmp_path / "in.safetensors"))
    safetensors_numpy.save_file(calib, str(tmp_path / "calib.safetensors"))
    return w


def table_error(stdout):
    """The rel.RMSE column of the tool's table for layer l.weight."""
    line = next(ln for ln in stdout.splitlines() if ln.startswith("l.weight"))
    return float(line.split()[3])


@pytest.mark.parametrize("method", ["gptq", "sparsegpt"])
def test_huge_activations_give_a_finite_result(tool, tmp_path, method):
    """One activation of 1e30 made the f32 Hessian +Inf; the tool then exited 0 with a
    relative error of 0.998 (GPTQ: 98 % zero weights; SparseGPT: NaN weights)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    x[17, 5] = 1e30
    calib_case(tmp_path, {"l.inputs": x})
    args = ["--sparsity", "2:4"] if method == "sparsegpt" else []
    r = run(tool, "quantize", tmp_path / "in.safetensors", "-o", tmp_path / "o.safetensors",
            "--format", "int8", "--method", method, *args, "--calib",
            tmp_path / "calib.safetensors")
    assert r.returncode == 0, r.stderr
    err = table_error(r.stdout)
    # int8 alone is about 0.01; 2:4 pruning keeps half the weights, about 0.6 of the norm
    assert err < (0.75 if method == "sparsegpt" else 0.05), r.stdout


def test_empty_or_out_of_range_calibration_is_refused(tool, tmp_path):
    out = tmp_path / "o.safetensors"
    cases = [({"l.inputs": np.zeros((0, 64), np.float32)}, "l.inputs: 0 tokens"),
             ({"l.hessian": np.zeros((64, 64), np.float64)}, "every diagonal entry is 0"),
             ({"l.hessian": np.eye(64) * 1e300}, "inverse factor"),
             ({"l.hessian": np.eye(64) * 1e-300}, "inverse factor")]
    for calib, msg in cases:
        calib_case(tmp_path, calib)
        r = run(tool, "quantize", tmp_path / "in.safetensors", "-o", out, "--format", "nf4",
                "--blocksize", "64", "--method", "gptq", "--calib",
                tmp_path / "calib.safetensors")
        assert r.returncode == 1 and msg in r.stderr, (msg, r.stdout, r.stderr)
        assert not out.exists()


# ---- 5. side files: regular, bounded, named ---------------------------------------------------


@pytest.mark.parametrize("which", ["config.json", "model.safetensors.index.json"])
def test_a_fifo_side_file_is_refused_without_blocking(tool, tmp_path, which):
    """A FIFO config.json or index hung the tool (the weights files were already refused)."""
    d = small_folder(tmp_path)
    os.remove(d / which)
    os.mkfifo(d / which)
    r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nf4", "-q", timeout=30)
    assert r.returncode == 1, r.stderr
    assert which in r.stderr and "not a regular file (a FIFO)" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_a_huge_config_is_refused_before_it_is_read(tool, tmp_path):
    """A 30 MB config.json cost over a gigabyte of memory and was written back 3.5 times
    larger: side files are now limited to 16 MiB, refused by their size alone."""
    d = small_folder(tmp_path)
    cfg = json.load(open(d / "config.json"))
    cfg["junk"] = [0] * (9 << 20)  # "0, " x 9 Mi: about 27 MB
    (d / "config.json").write_text(json.dumps(cfg))
    assert os.path.getsize(d / "config.json") > 16 << 20
    r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nf4", "-q")
    assert r.returncode == 1, r.stderr
    assert "config.json" in r.stderr and "over the 16 MiB limit of a side file" in r.stderr
    # act-amax and a part marker go through the same reader
    amax = tmp_path / "amax.json"
    os.mkfifo(amax)
    r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nvfp4", "--layout",
            "modelopt", "--act-amax", amax, timeout=30)
    assert r.returncode == 2 and "--act-amax" in r.stderr and "a FIFO" in r.stderr, r.stderr


# ---- 6. a tensor in two shards, an index naming a shard that lacks it ------------------------


def two_shards(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    rng = np.random.default_rng(0)
    a = {"l0.weight": rng.standard_normal((8, 64)).astype(np.float32)}
    b = {"l1.weight": rng.standard_normal((8, 64)).astype(np.float32)}
    (d / "config.json").write_text('{"model_type": "bert"}')
    return d, a, b


def write_index(d, weight_map):
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 1}, "weight_map": weight_map}))


def test_a_tensor_held_by_two_shards_is_refused(tool, tmp_path):
    """It used to be taken silently from the shard the index does not name."""
    d, a, b = two_shards(tmp_path)
    b_dup = dict(b, **{"l0.weight": np.zeros((8, 64), np.float32)})
    safetensors_numpy.save_file(a, str(d / "s1.safetensors"))
    safetensors_numpy.save_file(b_dup, str(d / "s2.safetensors"))
    write_index(d, {"l0.weight": "s1.safetensors", "l1.weight": "s2.safetensors"})
    r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nf4", "-q")
    assert r.returncode == 1, r.stderr
    assert "'l0.weight' is held by two shards, s1.safetensors and s2.safetensors" in r.stderr
    assert not (tmp_path / "out").exists()


def test_an_index_naming_a_shard_without_the_tensor_is_refused(tool, tmp_path):
    """It used to be accepted (the tensor taken from wherever it was)."""
    d, a, b = two_shards(tmp_path)
    safetensors_numpy.save_file(a, str(d / "s1.safetensors"))
    safetensors_numpy.save_file(b, str(d / "s2.safetensors"))
    cases = [({"l0.weight": "s2.safetensors", "l1.weight": "s2.safetensors",
               "s1.extra": "s1.safetensors"},
              "'l0.weight' is in shard s2.safetensors, which does not hold it (s1.safetensors "
              "does)"),
             ({"l0.weight": "s1.safetensors", "l1.weight": "s2.safetensors",
               "gone.weight": "s1.safetensors"},
              "'gone.weight' is in shard s1.safetensors, which does not hold it (no shard does)"),
             ({"l0.weight": "s2.safetensors", "l1.weight": "s2.safetensors"},
              "'l0.weight' is in shard s2.safetensors, which does not hold it (no shard does)")]
    for weight_map, msg in cases:
        write_index(d, weight_map)
        r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nf4", "-q")
        assert r.returncode == 1 and msg in r.stderr, (msg, r.stderr)
        assert not (tmp_path / "out").exists()
    write_index(d, {"l0.weight": "s1.safetensors", "l1.weight": "s2.safetensors"})
    r = run(tool, "quantize", d, "-o", tmp_path / "out", "--format", "nf4", "-q")
    assert r.returncode == 0, r.stderr


# ---- 8. --act-amax values that float32 cannot hold -------------------------------------------


@pytest.mark.parametrize("amax", [1e300, 1e-300, 1e-42])
def test_act_amax_outside_float32_is_refused(tool, tmp_path, amax):
    """An amax of 1e300 wrote input_scale = inf, 1e-300 wrote 0 (exit 0)."""
    d = tmp_path / "model"
    write_model(d, layers=1, hidden=64, intermediate=128, vocab=100, shards=1, dtype="f32")
    idx = json.load(open(d / "model.safetensors.index.json"))["weight_map"]
    mods = [k[: -len(".weight")] for k in idx if "_proj." in k]
    f = tmp_path / "amax.json"
    f.write_text(json.dumps({m: (amax if i == 0 else 1.0) for i, m in enumerate(mods)}))
    out = tmp_path / "out"
    r = run(tool, "quantize", d, "-o", out, "--format", "nvfp4", "--layout", "modelopt",
            "--act-amax", f, "-q")
    assert r.returncode == 1, r.stderr
    assert "outside float32's normal range" in r.stderr and mods[0] in r.stderr, r.stderr
    assert not out.exists()
