#!/usr/bin/env python3
"""check_pdl.py: every kernel launched with programmatic dependent launch waits before it touches memory.

src/backend/cuda/pdl.cuh's contract: a kernel started through forge_pdl_launch may run under the previous kernel's
tail, so every thread calls forge_pdl_wait() unconditionally before its first global-memory access (and no thread
returns before it). This script finds every forge_pdl_launch(KERNEL, ...) under src/, resolves KERNEL to the
__global__ functions it can name (directly, through a conditional expression, or through a local variable assigned
such an expression in the calling function), and checks each kernel's body in source order up to its wait:

- forge_pdl_wait() is called at the body's top level (not under an if / loop), either in the kernel itself or in a
  device function the kernel calls at its top level whose own body passes this check (gemm_wgmma_body, say);
  forge_pdl_launch_dependents() follows it at the same level;
- before the wait: no `return`, no inline asm, no use of a parameter other than a scalar one (an arithmetic type, or
  a struct of arithmetic fields, by value or by reference: kernel-parameter space, never global memory) or a
  CUtensorMap (parameter space too; the TMA copies that read through one are calls, checked as such); calls
  only to ALLOW (helpers that touch shared memory, barriers or the parameters' tensor maps, listed below with the
  reason) or to device functions that are "pure": every parameter scalar, no inline asm, and only pure or ALLOW
  calls inside (their arguments are still checked, so p[i] as an argument is caught).

It cannot see through everything (a kernel reached through a function pointer from elsewhere is reported as not
resolvable, which fails the check), but it catches a kernel converted without its wait, a read, write, atomic or
TMA / cp.async issued before the wait, and a conditional or early-returning wait. `--self-test` runs it on
snippets with such mistakes first; `--list` prints every kernel checked. Prints each failure and "N passed, N
failed" (one per launch site and kernel); exit 1 on any failure. Usage: scripts/check_pdl.py [--self-test] [--list]
[ROOT].
"""
import glob
import os
import re
import sys

# Calls allowed before the wait: none of them reads or writes global memory.
ALLOW = {
    "__syncthreads": "a CTA barrier",
    "__syncwarp": "a warp barrier",
    "smem_u32": "a generic-to-shared address conversion",
    "__cvta_generic_to_shared": "a generic-to-shared address conversion",
    "min": "arithmetic",
    "max": "arithmetic",
    "mbar_init": "mbarrier.init on a shared-memory barrier",
    "wgmma_ring_init": "mbarrier.init of shared-memory barriers + fences that make them visible",
    "fb_barriers_init": "mbarrier.init of shared-memory barriers + fences that make them visible",
    "tma_prefetch_desc": "prefetch.tensormap of a __grid_constant__ tensor map (parameter space)",
    "wgmma_warpgroup_index": "a shuffle of threadIdx",
    "wgmma_warp_index": "a shuffle of threadIdx",
    "fp8_cluster_rank": "a read of %cluster_ctarank",
    "fp8_cluster_sync": "barrier.cluster (the cluster's CTAs, no memory)",
}
# Words followed by '(' that are not calls.
NOT_CALLS = {"if", "for", "while", "switch", "sizeof", "alignof", "static_assert", "decltype", "return",
             "__launch_bounds__", "__align__", "constexpr", "static_cast", "reinterpret_cast", "const_cast",
             "catch", "defined"}
ARITH = {"int", "unsigned", "signed", "long", "short", "char", "float", "double", "bool", "size_t", "ptrdiff_t",
         "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "uintptr_t",
         "dim3", "uint2", "uint3", "uint4", "int2", "int4", "float2", "float4", "void"}
QUALIFIERS = {"const", "volatile", "__restrict__", "__grid_constant__", "struct", "static", "register"}

TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|->|::|&&|\|\||==|!=|<=|>=|\+\+|--|[^\s\w]")


def strip_source(text):
    """Comments, string and character literals, and preprocessor lines removed (line structure kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    lines, cont = [], False
    for line in "".join(out).split("\n"):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def tokenize(text):
    """[(token, line)]"""
    toks = []
    for lineno, line in enumerate(text.split("\n"), 1):
        toks.extend((m.group(0), lineno) for m in TOKEN.finditer(line))
    return toks


def match(toks, i, open_, close):
    """index of the token closing the bracket opened at toks[i]"""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j][0] == open_:
            depth += 1
        elif toks[j][0] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def split_top(toks, lo, hi):
    """toks[lo:hi] split at commas outside (), [], {} and template brackets"""
    parts, cur, depth, angle = [], [], 0, 0
    for k in range(lo, hi):
        t = toks[k][0]
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif t == "<" and k > lo and re.match(r"[A-Za-z_]", toks[k - 1][0]) and toks[k - 1][0] not in ("return",):
            angle += 1
        elif t == ">" and angle > 0:
            angle -= 1
        if t == "," and depth == 0 and angle == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(toks[k])
    if cur:
        parts.append(cur)
    return parts


class Func:
    def __init__(self, name, kind, path, line, params, toks, lo, hi):
        self.name, self.kind, self.path, self.line = name, kind, path, line
        self.params, self.toks, self.lo, self.hi = params, toks, lo, hi  # body: toks[lo] == '{', toks[hi] == '}'


class Source:
    """Every __global__ / __device__ function definition and scalar struct of the files, and the PDL launches."""

    def __init__(self, files):
        self.funcs, self.files, self.scalar_types = {}, {}, set(ARITH)
        structs, aliases = {}, {}
        for path in files:
            toks = tokenize(strip_source(open(path, encoding="utf-8").read()))
            self.files[path] = toks
            self._find_funcs(path, toks)
            self._find_structs(toks, structs, aliases)
        changed = True  # a struct is scalar when every field is: iterate over nested structs and aliases
        while changed:
            changed = False
            for name, fields in structs.items():
                if name not in self.scalar_types and all(self._field_scalar(f) for f in fields):
                    self.scalar_types.add(name)
                    changed = True
            for alias, target in aliases.items():
                if alias not in self.scalar_types and all(t in self.scalar_types for t in target):
                    self.scalar_types.add(alias)
                    changed = True

    def _find_funcs(self, path, toks):
        for i, (t, line) in enumerate(toks):
            if t not in ("__global__", "__device__"):
                continue
            j = i + 1
            while j < len(toks) and j < i + 40:
                tj = toks[j][0]
                if tj in (";", "=", "{", "}"):
                    break
                if tj in ("__launch_bounds__", "__align__") and toks[j + 1][0] == "(":
                    j = match(toks, j + 1, "(", ")") + 1
                    continue
                if re.match(r"[A-Za-z_]", tj) and toks[j + 1][0] == "(":
                    close = match(toks, j + 1, "(", ")")
                    k = close + 1
                    while toks[k][0] in ("const", "noexcept"):
                        k += 1
                    if toks[k][0] == "{":
                        params = [self._param(p) for p in split_top(toks, j + 2, close)]
                        end = match(toks, k, "{", "}")
                        f = Func(tj, "global" if t == "__global__" else "device", path, toks[j][1],
                                 [p for p in params if p], toks, k, end)
                        self.funcs.setdefault(tj, []).append(f)
                    break
                j += 1

    @staticmethod
    def _param(ptoks):
        words = [t for t, _ in ptoks]
        if "=" in words:  # a default value
            words = words[:words.index("=")]
        if not words or words == ["void"]:
            return None
        outer, depth = [], 0  # array bounds dropped: float (&d)[BN / 2] declares d
        for w in words:
            if w == "[":
                depth += 1
            elif w == "]":
                depth -= 1
            elif depth == 0:
                outer.append(w)
        names = [w for w in outer if re.match(r"[A-Za-z_]\w*$", w)]
        name = names[-1] if names else ""
        type_words = outer[:len(outer) - 1 - outer[::-1].index(name)] if name else outer
        return {"name": name, "pointer": "*" in type_words, "ref": "&" in type_words,
                "base": [w for w in type_words if re.match(r"[A-Za-z_]\w*$", w) and w not in QUALIFIERS]}

    @staticmethod
    def _find_structs(toks, structs, aliases):
        n = len(toks)
        for i, (t, _) in enumerate(toks):
            if t != "struct":
                continue
            j = i + 1
            name = toks[j][0] if j < n and re.match(r"[A-Za-z_]", toks[j][0]) else None
            if name:
                j += 1
            if j >= n or toks[j][0] != "{":
                continue
            end = match(toks, j, "{", "}")
            fields = [f for f in Source._split_fields(toks, j + 1, end)]
            if i > 0 and toks[i - 1][0] == "typedef":  # typedef struct [tag] { ... } NAME;
                name = toks[end + 1][0]
            if name:
                structs[name] = fields
        for i, (t, _) in enumerate(toks):  # typedef A B;  (B is scalar when A is)
            if t == "typedef" and i + 1 < n and toks[i + 1][0] != "struct":
                k = i + 1
                words = []
                while k < n and toks[k][0] != ";":
                    words.append(toks[k][0])
                    k += 1
                if len(words) >= 2 and all(re.match(r"[A-Za-z_]\w*$", w) for w in words):
                    aliases[words[-1]] = [w for w in words[:-1] if w not in QUALIFIERS]

    @staticmethod
    def _split_fields(toks, lo, hi):
        fields, cur, depth = [], [], 0
        for k in range(lo, hi):
            t = toks[k][0]
            if t in "({[":
                depth += 1
            elif t in ")}]":
                depth -= 1
            if t == ";" and depth == 0:
                if cur:
                    fields.append(cur)
                cur = []
            else:
                cur.append(t)
        return fields

    def _field_scalar(self, words):
        """a data member of arithmetic or scalar-struct type, not a pointer or reference (a member function, or
        anything not recognised, counts as not scalar)"""
        if any(w in ("(", "*", "&", "{", "operator") for w in words):
            return False
        types = []
        for k, w in enumerate(words):  # the type: the words before the first declarator
            nxt = words[k + 1] if k + 1 < len(words) else ";"
            if re.match(r"[A-Za-z_]\w*$", w) and nxt in (",", ";", "[", "=", ":"):
                break
            if re.match(r"[A-Za-z_]\w*$", w) and w not in QUALIFIERS:
                types.append(w)
        return bool(types) and all(w in self.scalar_types for w in types)

    def scalar(self, p):
        """by value or by reference, an arithmetic value or a struct of them: kernel-parameter space or registers"""
        return not p["pointer"] and bool(p["base"]) and all(w in self.scalar_types for w in p["base"])

    @staticmethod
    def tensor_map(p):
        """a CUtensorMap (a __grid_constant__ parameter): reading it is parameter space; the TMA copies that use
        it are calls, checked as such"""
        return "CUtensorMap" in p["base"]

    def launches(self):
        """[(path, line, [kernel names] or None, text)] for every forge_pdl_launch call"""
        out = []
        for path, toks in self.files.items():
            for i, (t, line) in enumerate(toks):
                if t != "forge_pdl_launch" or toks[i + 1][0] != "(":
                    continue
                if toks[i + 2][0] == "void":  # the launcher's own definition
                    continue
                close = match(toks, i + 1, "(", ")")
                args = split_top(toks, i + 2, close)
                first = args[0] if args else []
                out.append((path, line, self._resolve(toks, i, first, 0), " ".join(t for t, _ in first)))
        return out

    def _kernels_in(self, ptoks):
        return [t for t, _ in ptoks if any(f.kind == "global" for f in self.funcs.get(t, []))]

    def _resolve(self, toks, at, expr, depth):
        names = self._kernels_in(expr)
        if names:
            return names
        idents = [t for t, _ in expr if re.match(r"[A-Za-z_]\w*$", t)]
        if len(idents) != 1 or depth > 2:
            return None
        var = idents[0]
        # the calling function's body: back to the brace that opens it at file level
        depth_at, start = 0, 0
        for k in range(at, -1, -1):
            if toks[k][0] == "}":
                depth_at += 1
            elif toks[k][0] == "{":
                if depth_at == 0:
                    start = k
                depth_at = max(depth_at - 1, 0)
        found = []
        for k in range(start, at):
            if toks[k][0] == var and toks[k + 1][0] == "=" and toks[k - 1][0] not in (".", "->"):
                end = k + 2
                while toks[end][0] != ";":
                    end += 1
                r = self._resolve(toks, k, toks[k + 2:end], depth + 1)
                if r is None:
                    return None
                found += r
        return found or None


class Checker:
    def __init__(self, src):
        self.src = src
        self.memo = {}

    def pure(self, f, stack=()):
        if (f.path, f.name, f.line) in stack:
            return True
        if not all(self.src.scalar(p) for p in f.params):
            return False
        toks = f.toks
        for k in range(f.lo + 1, f.hi):
            t = toks[k][0]
            if t == "asm":
                return False
            if re.match(r"[A-Za-z_]\w*$", t) and self._is_call(toks, k):
                if t in ALLOW or t in NOT_CALLS:
                    continue
                defs = self.src.funcs.get(t)
                if not defs or not all(self.pure(g, stack + ((f.path, f.name, f.line),)) for g in defs):
                    return False
        return True

    def _is_call(self, toks, k):
        """toks[k] is a name followed by '(' or by template arguments and '(' (known functions only)"""
        nxt = toks[k + 1][0]
        if nxt == "(":
            return True
        if nxt == "<" and (toks[k][0] in self.src.funcs or toks[k][0] in ALLOW):
            e = self._skip_template(toks, k + 1)
            return toks[e + 1][0] == "("
        return False

    @staticmethod
    def _skip_template(toks, k):
        depth = 0
        for j in range(k, len(toks)):
            if toks[j][0] == "<":
                depth += 1
            elif toks[j][0] == ">":
                depth -= 1
                if depth == 0:
                    return j
            elif toks[j][0] == ">>":
                depth -= 2
                if depth <= 0:
                    return j
        return len(toks) - 1

    def check(self, f, stack=()):
        """None if f's body waits before any global access (the rules at the top), else the reason"""
        key = (f.path, f.name, f.line)
        if key in self.memo:
            return self.memo[key]
        if key in stack:
            return "recursion"
        why = self._check(f, stack + (key,))
        self.memo[key] = why
        return why

    def _check(self, f, stack):
        toks = f.toks
        params = {p["name"]: p for p in f.params}
        depth, k = 0, f.lo
        while k < f.hi:
            t, line = toks[k]
            where = f"{os.path.relpath(f.path)}:{line}"
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
            elif t == "return":
                return f"{where}: returns before forge_pdl_wait()"
            elif t == "asm":
                return f"{where}: inline asm before forge_pdl_wait()"
            elif re.match(r"[A-Za-z_]\w*$", t) and self._is_call(toks, k) and t not in NOT_CALLS:
                # a statement of its own at the body's top level: not under an if / loop, braces or not
                unconditional = depth == 1 and toks[k - 1][0] in (";", "{", "}")
                if t == "forge_pdl_launch_dependents":
                    return f"{where}: forge_pdl_launch_dependents() before forge_pdl_wait() (call it after the wait)"
                if t == "forge_pdl_wait":
                    if not unconditional:
                        return f"{where}: forge_pdl_wait() inside a condition or loop (every thread must wait)"
                    return self._after_wait(f, k, where)
                if t in ALLOW:  # its arguments are scanned like any other code
                    k += 1
                    continue
                defs = self.src.funcs.get(t)
                if not defs:
                    return f"{where}: calls {t}() before forge_pdl_wait() (not a device function of src/; if it " \
                           f"touches no global memory, add it to ALLOW in scripts/check_pdl.py with the reason)"
                results = [self.check(g, stack) for g in defs]
                if all(r is None for r in results):
                    if not unconditional:
                        return f"{where}: {t}() waits, but is called inside a condition or loop"
                    return None
                if not all(self.pure(g) for g in defs):
                    return f"{where}: calls {t}() before forge_pdl_wait(), and {t} may touch memory " \
                           f"({next(r for r in results if r)})"
            elif t in params and toks[k - 1][0] not in (".", "->", "::") and not self.src.scalar(params[t]) \
                    and not self.src.tensor_map(params[t]):
                return f"{where}: uses parameter {t} before forge_pdl_wait()"
            k += 1
        return f"{os.path.relpath(f.path)}:{f.line}: {f.name} never calls forge_pdl_wait() at its top level"

    @staticmethod
    def _after_wait(f, k, where):
        toks, depth = f.toks, 1
        for j in range(k + 1, f.hi):
            t = toks[j][0]
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
            elif t == "forge_pdl_launch_dependents" and depth == 1:
                return None
        return f"{where}: no forge_pdl_launch_dependents() after the wait at the same level"


def run(files, quiet=False, listing=False):
    src = Source(files)
    checker = Checker(src)
    passed, failed, kernels = 0, [], set()
    launches = src.launches()
    for path, line, names, text in launches:
        site = f"{os.path.relpath(path)}:{line}"
        if names is None:
            failed.append(f"{site}: forge_pdl_launch({text}, ...): cannot tell which __global__ kernel it launches "
                          f"(name it, or assign it to a local variable in the calling function)")
            continue
        for name in sorted(set(names)):
            for f in src.funcs[name]:
                if f.kind != "global":
                    continue
                why = checker.check(f)
                kernels.add((f.path, f.name))
                if why is None:
                    passed += 1
                    if listing:
                        print(f"ok   {site}: {name} ({os.path.relpath(f.path)}:{f.line})")
                else:
                    failed.append(f"{site}: kernel {name}: {why}")
    if not quiet:
        for b in failed:
            print("FAIL " + b)
        print(f"pdl: {len(launches)} forge_pdl_launch sites, {len(kernels)} kernels")
        print(f"{passed} passed, {len(failed)} failed")
    return passed, failed


SELF_TEST = {
    "ok.cu": """
__device__ __forceinline__ int pure_index(int a, int b) { return min(a, b) * 2; }
template <int N> __device__ __forceinline__ void body(const float *x, float *y, int n, int m) {
    extern __shared__ unsigned char sm[];
    const unsigned base = smem_u32(sm);
    if (threadIdx.x == 0) mbar_init(base, 1);
    __syncthreads();
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    if (n == 0) return;
    y[0] = x[0];
}
typedef struct { int B, T; long long stride; } shape_t;
__global__ void good_direct(float *y, const float *x, shape_t s, int n) {
    const int i = pure_index(s.B, n);
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    y[i] = x[i];
}
template <int N> __global__ void good_body(const float *x, float *y, int n) { body<N>(x, y, n, 0); }
static void host_ok(int c) {
    forge_pdl_launch(good_direct, 1, 1, 0, 0, 1, 0, 0, 0);
    const auto k = c ? good_body<1> : good_body<2>;
    forge_pdl_launch(k, 1, 1, 0, 0, 1, 0, 0, 0);
}
""",
    "bad.cu": """
typedef struct { float *p; int n; } holder_t;
__device__ __forceinline__ float load_it(const float *p) { return p[0]; }
__global__ void no_wait(float *y) { y[0] = 1.0f; }
__global__ void store_first(float *y) { y[threadIdx.x] = 0.0f; forge_pdl_wait(); forge_pdl_launch_dependents(); }
__global__ void return_first(float *y, int n) {
    if (threadIdx.x >= n) return;
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    y[0] = 0.0f;
}
__global__ void cond_wait(float *y, int n) {
    if (n) forge_pdl_wait();
    forge_pdl_launch_dependents();
    y[0] = 0.0f;
}
__global__ void pure_arg_read(const float *x, float *y) {
    const int i = min((int)x[0], 4);
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    y[i] = 0.0f;
}
__global__ void call_first(const float *x, float *y) {
    const float v = load_it(x);
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    y[0] = v;
}
__global__ void struct_ptr(holder_t h) {
    const int n = h.n;
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    h.p[0] = (float)n;
}
__global__ void tma_first(const __grid_constant__ CUtensorMap tm, unsigned bar) {
    tma_load_2d(0, &tm, 0, 0, bar);
    forge_pdl_wait();
    forge_pdl_launch_dependents();
}
__global__ void no_trigger(float *y) { forge_pdl_wait(); y[0] = 0.0f; }
static void host_bad(float *y, void (*fp)(float *)) {
    forge_pdl_launch(no_wait, 1, 1, 0, 0, 1, y);
    forge_pdl_launch(store_first, 1, 1, 0, 0, 1, y);
    forge_pdl_launch(return_first, 1, 1, 0, 0, 1, y, 1);
    forge_pdl_launch(cond_wait, 1, 1, 0, 0, 1, y, 1);
    forge_pdl_launch(pure_arg_read, 1, 1, 0, 0, 1, y, y);
    forge_pdl_launch(call_first, 1, 1, 0, 0, 1, y, y);
    forge_pdl_launch(struct_ptr, 1, 1, 0, 0, 1, holder_t{});
    forge_pdl_launch(tma_first, 1, 1, 0, 0, 1, 0, 0);
    forge_pdl_launch(no_trigger, 1, 1, 0, 0, 1, y);
    forge_pdl_launch(fp, 1, 1, 0, 0, 1, y);
}
""",
}


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        for name, text in SELF_TEST.items():
            paths[name] = os.path.join(d, name)
            with open(paths[name], "w", encoding="utf-8") as fh:
                fh.write(text)
        ok_passed, ok_failed = run([paths["ok.cu"]], quiet=True)
        bad_passed, bad_failed = run([paths["bad.cu"]], quiet=True)
    problems = []
    if ok_failed or ok_passed != 2:
        problems.append(f"the correct snippets: {ok_passed} passed (expected 2), failures {ok_failed}")
    if bad_passed or len(bad_failed) != 10:
        problems.append(f"the broken snippets: {bad_passed} passed (expected 0), {len(bad_failed)} failed (expected "
                        f"10): {bad_failed}")
    for p in problems:
        print("FAIL self-test: " + p)
    return not problems


def main():
    args = [a for a in sys.argv[1:] if a not in ("--self-test", "--list")]
    root = args[0] if args else "."
    os.chdir(root)
    if "--self-test" in sys.argv[1:] and not self_test():
        print("0 passed, 1 failed")
        return 1
    files = sorted(glob.glob("src/**/*.cu", recursive=True) + glob.glob("src/**/*.cuh", recursive=True) +
                   glob.glob("src/**/*.h", recursive=True))
    _, failed = run(files, listing="--list" in sys.argv[1:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
