#!/usr/bin/env bash
# What ARCHITECTURE.md promises, checked: rmcp is used by tether-mcp alone and no crate declares a
# dependency its code never names. (That the binary builds without the embedded model, with no
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
for failure in failures:
    print(failure, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
