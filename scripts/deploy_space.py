"""Deploy EAGLE Lens to a Hugging Face Space in one command.

    python scripts/deploy_space.py --repo USER/SPACE            # create the Space if needed, then upload
    python scripts/deploy_space.py --repo USER/SPACE --dry-run  # list what would be uploaded; no network

The upload goes through huggingface_hub's HfApi.upload_folder, which stores large binaries (the two 16.8 MB
draft heads) as LFS/Xet objects; a plain `git push` to a Space refuses files over 10 MB. Only what the running
app needs is uploaded (ALLOW_PATTERNS, minus IGNORE_PATTERNS): tests, training runs, data, virtualenvs, caches
and the developer scripts stay local. Code and assets that were deleted here are deleted on the Space too
(DELETE_PATTERNS), so a renamed module does not linger there.

Authentication is huggingface_hub's own: `hf auth login` once, or HF_TOKEN in the environment.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# huggingface_hub matches these with fnmatch, where `*` also crosses `/`: "eagle_core/*.py" covers subpackages
ALLOW_PATTERNS = [
    "app.py",
    "requirements.txt",          # the Space installs this (runtime only; requirements-dev.txt stays local)
    "README.md",                 # its YAML front matter configures the Space (sdk, sdk_version, python_version)
    "eagle_core/*.py",
    "views/*.py",
    "views/js/*.js",             # the page's script (views/page.py reads these when it is imported)
    "tabs/*.py",
    "assets/*",                  # heads (safetensors + config), trees, the recorded trace, draft vocab, bench, screenshots
]
IGNORE_PATTERNS = [
    "tests/*", "runs/*", "data/*", "shards/*", "test-artifacts/*", "scripts/*",
    ".venv/*", "venv/*", ".git/*", ".pytest_cache/*", "*/__pycache__/*", "__pycache__/*", "*.pyc", "*.log",
    ".whl/*", "shared/*",
]
# remote files matching these that are not part of this upload are deleted (stale modules / assets)
DELETE_PATTERNS = ["eagle_core/*.py", "views/*.py", "views/js/*.js", "tabs/*.py", "assets/*"]


def upload_list(root: str = ROOT) -> list[tuple[str, int]]:
    """[(path relative to root, size in bytes)] of exactly the files upload_folder would send, sorted.

    Uses huggingface_hub's own pattern filter (the one upload_folder applies), so the dry run and the real
    upload cannot disagree. Local only: no network.
    """
    from huggingface_hub.utils import filter_repo_objects
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".venv", "venv", "__pycache__"))
        for name in filenames:
            paths.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    kept = filter_repo_objects(sorted(paths), allow_patterns=ALLOW_PATTERNS, ignore_patterns=IGNORE_PATTERNS)
    return [(p, os.path.getsize(os.path.join(root, p))) for p in kept]


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def print_listing(files: list[tuple[str, int]], out=None):
    out = out or sys.stdout
    for path, size in files:
        print(f"{size:>12,}  {path}", file=out)
    print(f"{len(files)} files, {human(sum(s for _, s in files))} in total", file=out)


def check(files: list[tuple[str, int]]) -> list[str]:
    """Problems that would make the Space fail to start (missing essentials)."""
    have = {p for p, _ in files}
    need = ["app.py", "requirements.txt", "README.md", "eagle_core/decoding/engine.py", "tabs/lens.py", "views/__init__.py",
            "views/js/fit.js", "views/js/lens.js", "assets/heads/smollm2-135m-shifted/model.safetensors", "assets/heads/smollm2-135m-shifted/config.json"]
    return [f"missing: {p}" for p in need if p not in have]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Upload EAGLE Lens to a Hugging Face Space (huggingface_hub upload).")
    ap.add_argument("--repo", required=True, help="the Space, as USER/SPACE (or ORG/SPACE)")
    ap.add_argument("--dry-run", action="store_true", help="list the files and their total size; no network")
    ap.add_argument("--private", action="store_true", help="create the Space private (when it does not exist)")
    ap.add_argument("--message", default="Deploy EAGLE Lens", help="commit message on the Space")
    args = ap.parse_args(argv)
    if args.repo.count("/") != 1 or not all(args.repo.split("/")):
        ap.error("--repo must look like USER/SPACE")

    files = upload_list()
    problems = check(files)
    print_listing(files)
    if problems:
        print("refusing to deploy: " + "; ".join(problems), file=sys.stderr)
        return 1
    if args.dry_run:
        print(f"(dry run: nothing was sent; without --dry-run these go to https://huggingface.co/spaces/{args.repo})")
        return 0

    from huggingface_hub import HfApi
    api = HfApi()
    api.create_repo(args.repo, repo_type="space", space_sdk="gradio", private=args.private, exist_ok=True)
    info = api.upload_folder(repo_id=args.repo, repo_type="space", folder_path=ROOT,
                             allow_patterns=ALLOW_PATTERNS, ignore_patterns=IGNORE_PATTERNS,
                             delete_patterns=DELETE_PATTERNS, commit_message=args.message)
    print(f"uploaded: {getattr(info, 'commit_url', info)}")
    print(f"the Space: https://huggingface.co/spaces/{args.repo} (it rebuilds from requirements.txt now)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
