"""level1/90's seed in float64 (session 54's, .kbsrc/probe/seed90_f64.py, from
``data/kernelbench_seeds_l1_90_h200_s54.json.xz`` as in cumprod_range_probe.py) and narrowed back to
fp32, timed (triton.testing.do_bench) at each block of 512-8192 and 4-32 warps beside torch.compile
and eager, on 32768 x 32768.  One device call: carry [".kbsrc"];
PYTHONPATH=$PWD python3 experiments/cumprod_sweep.py
"""
import importlib.util, itertools, json, os, torch, triton
OUT = os.environ.get("OUT", "/tmp")
text = open(".kbsrc/probe/seed90_f64.py").read()
narrow = text.replace(".to(tl.float64),)", ",)").replace("float('nan'), tl.float64)", "float('nan'), tl.float32)")
def load(name, t):
    open(f"/tmp/{name}.py", "w").write(t)
    s = importlib.util.spec_from_file_location(name, f"/tmp/{name}.py"); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); return m
x = torch.rand(32768, 32768, device="cuda")
res = {}
compiled = torch.compile(lambda t: torch.cumprod(t, 1))
compiled(x)
res["compile"] = triton.testing.do_bench(lambda: compiled(x), rep=300)
res["eager"] = triton.testing.do_bench(lambda: torch.cumprod(x, 1), rep=300)
for name, t in (("f64", text), ("f32", narrow)):
    m = load(name, t); model = m.ModelNew(1).cuda()
    for block, warps in itertools.product((512, 1024, 2048, 4096, 8192), (4, 8, 16, 32)):
        m.K0_BLOCK_R0, m.K0_NUM_WARPS = block, warps
        try:
            res[f"{name} R0={block} w={warps}"] = triton.testing.do_bench(lambda: model(x), rep=200)
        except Exception as e:
            res[f"{name} R0={block} w={warps}"] = str(e)[:100]
    print(name, flush=True)
json.dump(res, open(f"{OUT}/sweep90.json", "w"), indent=1)
for k, v in res.items(): print(k, v if isinstance(v, str) else round(v / res["compile"], 3), v)
