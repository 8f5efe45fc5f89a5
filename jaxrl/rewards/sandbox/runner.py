"""The program's side: `RUNNER`, the Python source the sandboxed interpreter runs.

It runs as `python -I -S -c RUNNER SETTINGS` inside the sandbox (standard library
only; it may be a different Python from the trainer's). `-S` skips `site`, whose `.pth`
files cost tens of milliseconds per program in a large environment; the runner puts
the site-packages folders on `sys.path` itself, so installed packages still import
(editable installs and other `.pth` hooks do not run). In order:

1. limits: the rlimits of `SETTINGS`; SIGXFSZ back to its default (Python ignores it,
   so an oversized output would end as an exception, not as the kill it is);
2. identity: as root, drop supplementary groups, gid and uid to the program's own uid
   (which clears every capability); in the no-namespace mode also set
   no-new-privileges and load the seccomp filter here (bwrap does both otherwise);
3. read the job from stdin (the program and the probes of `checks.split`; never the
   expected values), point stdin at /dev/null, compile the program and every probe
   *before* any program code runs;
4. run the program, then each probe in its namespace; `__report__(k, value)` writes
   `["v", test, k, encode(value)]` and a probe that ends writes `["done", test]`, one
   JSON line each, to the results descriptor; then `os._exit(0)`.

Nothing here is trusted after step 4 starts: the program may rewrite any of it. The
trainer reads the results as untrusted data (`checks.judge`).
"""

RUNNER = r"""
import contextlib, json, os, resource, signal, sys

def encode(value, depth=0):
    # Plain built-in values by exact type; anything else is unsupported (fails its check).
    if depth > 100:
        raise ValueError("too deep")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return {"f": repr(value)}
    if kind is complex:
        return {"c": [repr(value.real), repr(value.imag)]}
    if kind is bytes:
        return {"b": value.hex()}
    tags = {list: "l", tuple: "t", set: "s", frozenset: "fs"}
    if kind in tags:
        return {tags[kind]: [encode(x, depth + 1) for x in value]}
    if kind is dict:
        pairs = [{"t": [encode(k, depth + 1), encode(v, depth + 1)]} for k, v in value.items()]
        return {"d": pairs}
    return {"x": kind.__name__[:64]}

def prepare(cfg):
    for name, value in cfg["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    uid = cfg["uid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if cfg["seccomp"]:  # no bwrap to do it: no-new-privileges, then the filter
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            sys.exit("prctl(PR_SET_NO_NEW_PRIVS) failed")
        bpf = bytes.fromhex(cfg["seccomp"])
        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
        prog = ctypes.byref(Prog(len(bpf) // 8, bpf))  # 8 bytes per BPF instruction
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) != 0:
            sys.exit("prctl(PR_SET_SECCOMP) failed")
    os.chdir(cfg["cwd"])
    import site
    sys.path.extend(p for p in site.getsitepackages() if os.path.isdir(p))

def main():
    cfg = json.loads(sys.argv[1])
    prepare(cfg)
    write, fd = os.write, cfg["fd"]
    job = json.loads(sys.stdin.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    program = compile(job["program"], "solution.py", "exec")
    probes = []
    for i, probe in enumerate(job["probes"]):
        try:
            probes.append(compile(probe, f"test_{i}", "exec"))
        except BaseException:
            probes.append(None)
    del job
    current = [0]

    def report(k, value):
        try:
            line = json.dumps(["v", current[0], k, encode(value)])
        except (ValueError, TypeError, RecursionError):
            line = json.dumps(["v", current[0], k, {"x": "unencodable"}])
        write(fd, line.encode() + b"\n")

    namespace = {"__name__": "__main__", "__report__": report}
    exec(program, namespace)
    import traceback
    for i, probe in enumerate(probes):
        current[0] = i
        if probe is None:
            continue
        try:
            exec(probe, namespace)
        except BaseException:
            traceback.print_exc()
        else:
            write(fd, json.dumps(["done", i]).encode() + b"\n")
    for stream in (sys.stdout, sys.stderr):
        # The program may have closed or replaced the stream: what it buffered is its
        # own loss, and the results are written already.
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(0)

main()
"""
