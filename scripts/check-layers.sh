#!/usr/bin/env bash
# What ARCHITECTURE.md promises, checked: rmcp is used by tether-mcp and tether-serve alone, each
# crate depends only on the crates below it, no crate declares a dependency its code never names,
# no module imports a module that imports it back (no circles inside a crate), and no file of
# the binary is over 800 lines. (That the binary builds without the embedded model, with no
# C++, is checked by scripts/lint-build.sh, which builds and lints it so.)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import pathlib, re, sys, tomllib
failures = []
# The layers of ARCHITECTURE.md, bottom first: a crate depends only on crates of lower layers.
LAYER = {
    "tether-protocol": 0, "tether-encoder": 0, "tether-models": 0, "tether-llama-kernels": 0,
    "tether-mcp": 1, "tether-llm": 1,
    "tether-serve": 2, "tether-catalog": 2, "tether-local": 2,
    "tether-agent": 3, "tether-gateway": 3,
    "tether": 4,
}
for manifest in sorted(pathlib.Path("crates").glob("*/Cargo.toml")):
    crate = manifest.parent
    spec = tomllib.loads(manifest.read_text())
    name = spec["package"]["name"]
    sections = {"dependencies": ["src", "build.rs"], "dev-dependencies": ["src", "tests", "benches"]}
    for target in spec.get("target", {}).values():
        for section in sections:
            spec.setdefault(section, {}).update(target.get(section, {}))
    for section, places in sections.items():
        text = ""
        for place in places:
            path = crate / place
            files = [path] if path.is_file() else sorted(path.rglob("*.rs")) if path.is_dir() else []
            text += "".join(f.read_text() for f in files)
        for dep in spec.get(section, {}):
            if dep == "rmcp" and name not in ("tether-mcp", "tether-serve"):
                failures.append(f"{manifest}: rmcp belongs to tether-mcp and tether-serve alone (ARCHITECTURE.md)")
            if section == "dependencies" and dep in LAYER and name in LAYER and LAYER[dep] >= LAYER[name]:
                failures.append(f"{manifest}: {name} may not depend on {dep}: dependencies point down only (ARCHITECTURE.md)")
            ident = dep.replace("-", "_")
            if not re.search(rf"\b{re.escape(ident)}\b", text):
                failures.append(f"{manifest}: [{section}] {dep} is declared but never used; remove it")
# Files stay under about 800 lines, split along the seams of their jobs (the binary's are held
# to it; the library crates' long files are issue 27's split).
for path in sorted(pathlib.Path("crates/tether/src").rglob("*.rs")):
    lines = path.read_text().count("\n")
    if lines > 800:
        failures.append(f"{path}: {lines} lines; split it along its jobs (800 at most)")
# No circles among a crate's modules: `crate::a` in b and `crate::b` in a (or a longer ring).
sys.setrecursionlimit(10000)
for src in sorted(pathlib.Path("crates").glob("*/src")):
    imports = {}
    for path in src.rglob("*.rs"):
        module = path.relative_to(src).parts[0].removesuffix(".rs")
        if module in ("lib", "main"):
            continue
        code = re.sub(r"//[^\n]*", "", path.read_text())
        imports.setdefault(module, set()).update(
            m for m in re.findall(r"crate::([a-z_0-9]+)", code) if m != module)
    order, low, stack, on_stack, counter = {}, {}, [], set(), [0]
    def visit(v):
        order[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on_stack.add(v)
        for w in imports.get(v, ()):
            if w not in imports:
                continue
            if w not in order:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            ring = []
            while True:
                w = stack.pop(); on_stack.discard(w); ring.append(w)
                if w == v:
                    break
            if len(ring) > 1:
                failures.append(f"{src}: modules {', '.join(sorted(ring))} import each other; move what they share to one of them or a module of its own")
    for module in list(imports):
        if module not in order:
            visit(module)
for failure in failures:
    print(failure, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
