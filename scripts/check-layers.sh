#!/usr/bin/env bash
# What ARCHITECTURE.md promises, checked: rmcp is used by tether-mcp alone, no crate declares a
# dependency its code never names, and no file of the binary is over 800 lines. (That the binary builds without the embedded model, with no
# C++, is checked by scripts/lint-build.sh, which builds and lints it so.)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import pathlib, re, sys, tomllib
failures = []
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
            if dep == "rmcp" and name != "tether-mcp":
                failures.append(f"{manifest}: rmcp belongs to tether-mcp alone (ARCHITECTURE.md)")
            ident = dep.replace("-", "_")
            if not re.search(rf"\b{re.escape(ident)}\b", text):
                failures.append(f"{manifest}: [{section}] {dep} is declared but never used; remove it")
# Files stay under about 800 lines, split along the seams of their jobs (the binary's are held
# to it; the library crates' long files are issue 27's split).
for path in sorted(pathlib.Path("crates/tether/src").rglob("*.rs")):
    lines = path.read_text().count("\n")
    if lines > 800:
        failures.append(f"{path}: {lines} lines; split it along its jobs (800 at most)")
for failure in failures:
    print(failure, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
