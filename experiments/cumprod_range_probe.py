"""level1/90 (cumprod of 32768 x 32768 fp32) on the correctness checks' inputs: the counts of NaN, Inf
and 0 of PyTorch's CUDA scan, of its float64 run, and of inductor's seed as derived before session 54
(fp32 scan), with a product combine that keeps 0, and in float64; each against the reference by
``evaluator.compare.mismatch`` (experiments/kernelbench_search.md, section 29).

The seed comes from session 52's records (``data/kernelbench_seeds_all_h200x2_s52.json.xz``) into the
ignored .kbsrc/probe/seed90.py:
    xz -dc RECORD | python3 -c "import json,sys; p=[x for x in json.load(sys.stdin)['problems']
        if x['name']=='level1/90_cumprod'][0]; open('.kbsrc/probe/seed90.py','w').write(p['seed'])"
One device call: carry [".kbsrc"]; PYTHONPATH=$PWD python3 experiments/cumprod_range_probe.py
"""
import importlib.util
import json
import os
import time

import torch
from evaluator.correctness import adversarial_variants
from evaluator.compare import mismatch

OUT = os.environ.get("OUT", "/tmp")
src = open(".kbsrc/probe/seed90.py").read()
safe = src.replace("tmp0 = arg0_0 * arg1_0", "tmp0 = tl.where((arg0_0 == 0) | (arg1_0 == 0), 0.0, arg0_0 * arg1_0)")
safe = safe.replace("tmp6 = tmp3 * tmp5", "tmp6 = tl.where((tmp3 == 0) | (tmp5 == 0), 0.0, tmp3 * tmp5)")
safe = safe.replace("tmp7 = tmp3 * tmp4", "tmp7 = tl.where((tmp3 == 0) | (tmp4 == 0), 0.0, tmp3 * tmp4)")
f64 = src.replace("tmp1 = tmp0.to(tl.float32)", "tmp1 = tmp0.to(tl.float64)").replace(
    "tmp3 = tl.full([XBLOCK, 1], float('nan'), tl.float32)", "tmp3 = tl.full([XBLOCK, 1], float('nan'), tl.float64)")
assert safe.count("tl.where((") == 3 and f64 != src
variants = {"seed": src, "zero_absorbing": safe, "float64_scan": f64}

def load(name, text):
    path = f"/tmp/{name}.py"
    open(path, "w").write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

def make():
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.rand(32768, 32768, device="cuda", generator=g)]

def counts(t):
    return {"nan": int(t.isnan().sum()), "inf": int(t.isinf().sum()), "zero": int((t == 0).sum())}

result = {"gpu": torch.cuda.get_device_name()}
for label, maker, scale in [("unit", make, 1.0)] + [(l, m, s) for l, m, s in adversarial_variants(make)]:
    x = maker()[0]
    ref = torch.cumprod(x, 1)
    torch.cuda.synchronize()
    row = {"reference": counts(ref)}
    ref64 = torch.cumprod(x.double(), 1).float()
    row["float64_reference"] = counts(ref64)
    row["float64_vs_reference"] = mismatch([ref], [ref64], None, None, scale)
    cpu = torch.cumprod(x[:64].cpu(), 1)
    row["cpu_sequential_64rows_vs_reference"] = mismatch([ref[:64].cpu()], [cpu], None, None, scale)
    del ref64
    for name, text in variants.items():
        m = load(name, text).ModelNew(1).cuda()
        out = m(x.clone()); torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5): m(x)
        torch.cuda.synchronize()
        row[name] = {**counts(out), "ms": (time.perf_counter() - t0) / 5 * 1e3,
                     "mismatch": mismatch([ref], [out], None, None, scale)}
        del out
    result[label] = row
    print(label, json.dumps(row, indent=1), flush=True)
    del x, ref
json.dump(result, open(f"{OUT}/cumprod_probe.json", "w"), indent=1)
