#!/usr/bin/env python3
"""Builds crates/catalog/benches/fixtures/toole.json, a tool-search development set from
MetaTool's ToolE data set (MIT; https://github.com/HowieHwong/MetaTool): its 199 tools (name
and description, dataset/plugin_des.json) and six of the user queries of each tool
(dataset/data/all_clean_data.csv), the ones whose SHA-256 sorts first; of those, the 1st, 3rd
and 5th are for development and the 2nd, 4th and 6th are held out (measured, never tuned on).

Usage: scripts/make-toole-fixture.py PATH/TO/MetaTool  (a checkout at the commit below)
"""
import csv, hashlib, json, pathlib, subprocess, sys

COMMIT = "35e81bb7576826e980c80fed8f8c0a2b4a1e6fbb"
PER_TOOL = 6

def main():
    repo = pathlib.Path(sys.argv[1])
    def show(path):
        return subprocess.run(["git", "-C", str(repo), "show", f"{COMMIT}:{path}"],
                              check=True, capture_output=True, text=True).stdout
    descriptions = json.loads(show("dataset/plugin_des.json"))
    queries = {}
    for row in csv.DictReader(show("dataset/data/all_clean_data.csv").splitlines()):
        question, tool = row["Query"].strip(), row["Tool"].strip()
        if question and tool in descriptions:
            queries.setdefault(tool, set()).add(question)
    development, held_out = [], []
    for tool in sorted(queries):
        chosen = sorted(queries[tool], key=lambda q: hashlib.sha256(q.encode()).hexdigest())[:PER_TOOL]
        for i, question in enumerate(chosen):
            (development if i % 2 == 0 else held_out).append({"question": question, "tool": tool})
    fixture = {
        "about": "Tool-search development set from MetaTool's ToolE (Huang et al., 2023): 199 tools "
                 "of the OpenAI plugin store as name and description, and six user queries per tool; "
                 "`development` may be tuned on, `held_out` is measured only. Built by "
                 "scripts/make-toole-fixture.py.",
        "source": f"https://github.com/HowieHwong/MetaTool/tree/{COMMIT} "
                  "(dataset/plugin_des.json, dataset/data/all_clean_data.csv)",
        "license": show("LICENSE"),
        "tools": [{"name": name, "description": descriptions[name]} for name in sorted(descriptions)],
        "development": development,
        "held_out": held_out,
    }
    out = pathlib.Path(__file__).resolve().parent.parent / "crates/catalog/benches/fixtures/toole.json"
    out.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
    print(f"{out}: {len(fixture['tools'])} tools, {len(development)} development, {len(held_out)} held out")

main()
