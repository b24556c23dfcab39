"""Prints the zoo manifest as the Markdown table shown in README.md."""

from __future__ import annotations

from pathlib import Path

import yaml

MANIFEST = Path(__file__).resolve().parent.parent / "agent_service" / "zoo" / "manifest.yaml"


def main() -> None:
    models = yaml.safe_load(MANIFEST.read_text())["models"]
    print(
        "| model | subject | algorithm | seed | timesteps | train wall (s) | file (KiB) "
        "| eval tests | failures | success rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, m in models.items():
        print(
            f"| `{name}` | `{m['subject']}` | {m['algorithm']} | {m['seed']} | {m['timesteps']:,} | "
            f"{m['train_wall_seconds']:.0f} | {m['file_bytes'] / 1024:.0f} | {m['eval_tests']:,} | "
            f"{m['eval_failures']} | {100 * m['success_rate']:.2f} % |"
        )


if __name__ == "__main__":
    main()
