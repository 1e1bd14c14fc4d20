"""Run by tests/files/test_sdk.py with anthropic==1.1.0 (in .venv-sdk110), as a subprocess.

Usage: old_sdk_calls.py BASE_URL API_KEY WORKDIR. Prints one JSON object with what happened.
This SDK generation sends `x-api-key`, `anthropic-beta: files-api-2025-04-14`, `?beta=true`,
and pages `client.beta.files` with after_id/before_id but `client.files` with page cursors.
"""

import json
import pathlib
import sys

import anthropic


def error_info(exc):
    return {
        "class": type(exc).__name__,
        "status": getattr(exc, "status_code", None),
        "body": getattr(exc, "body", None),
    }


def main():
    base_url, api_key, workdir = sys.argv[1:4]
    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, _strict_response_validation=True)
    out = {"version": anthropic.__version__}
    path = pathlib.Path(workdir) / "report.md"
    path.write_bytes(b"# report\n")
    from_path = client.beta.files.upload(file=path)
    from_bytes = client.beta.files.upload(file=b"raw bytes from 1.1.0")
    out["uploaded"] = [from_path.model_dump(mode="json"), from_bytes.model_dump(mode="json")]
    out["metadata"] = client.beta.files.retrieve_metadata(from_path.id).model_dump(mode="json")
    out["beta_ids"] = [f.id for f in client.beta.files.list(limit=10)]
    out["ga_ids"] = [f.id for f in client.files.list(limit=10)]
    first_page = client.beta.files.list(limit=10)
    out["beta_first_page"] = {"has_more": first_page.has_more, "last_id": first_page.last_id}
    try:
        client.beta.files.download(from_path.id)
        out["download"] = "allowed"
    except anthropic.APIStatusError as exc:
        out["download"] = error_info(exc)
    out["deleted"] = client.beta.files.delete(from_path.id).model_dump(mode="json")
    try:
        client.beta.files.retrieve_metadata(from_path.id)
        out["after_delete"] = "found"
    except anthropic.APIStatusError as exc:
        out["after_delete"] = error_info(exc)
    bad = anthropic.Anthropic(base_url=base_url, api_key="sk-mango-wrong", max_retries=0)
    try:
        bad.beta.files.list()
        out["wrong_key"] = "allowed"
    except anthropic.APIStatusError as exc:
        out["wrong_key"] = error_info(exc)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
