"""A Hugging Face Hub on the loopback interface, serving repositories that the tests build.

It answers the endpoints huggingface_hub calls to download a snapshot: the
repository's info at a revision (`/api/models/ORG/NAME/revision/REV`), its
file tree (`/api/models/ORG/NAME/tree/REV`), and each file
(`HEAD`/`GET /ORG/NAME/resolve/REV/PATH`, with `X-Repo-Commit` and `ETag`).
Errors carry the `X-Error-Code` headers the real hub sends, so
huggingface_hub raises the same exception types. Every request is recorded.
"""

import hashlib
import http.server
import json
import socket
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit


class LoopbackHub:
    """Start with `with LoopbackHub() as hub:`; `hub.endpoint` is what HF_ENDPOINT should say."""

    def __init__(self):
        self.repos = {}
        self.requests = []
        self._drops = {}
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def publish(self, repo_id, folder, branch="main", token=None):
        """Commit every file of `folder` to `repo_id` on `branch` (a new commit each call); returns the
        commit's sha. With `token`, the repository is private: requests must carry it."""
        files = {path.relative_to(folder).as_posix(): path.read_bytes()
                 for path in sorted(Path(folder).rglob("*")) if path.is_file()}
        digest = hashlib.sha1(repr(sorted((name, hashlib.sha1(data).hexdigest()) for name, data in files.items()))
                              .encode() + repo_id.encode() + str(len(self.repos.get(repo_id, {}).get("commits", {})))
                              .encode())
        commit = digest.hexdigest()
        repo = self.repos.setdefault(repo_id, {"branches": {}, "commits": {}, "token": token})
        repo["commits"][commit] = files
        repo["branches"][branch] = commit
        return commit

    def drop_connection(self, repo_id, filename, after_bytes):
        """Send `filename` only up to `after_bytes`, then close the connection; answer 503 afterwards."""
        self._drops[(repo_id, filename)] = after_bytes

    def count(self, prefix=""):
        """How many requests were made whose path starts with `prefix`."""
        return sum(path.startswith(prefix) for _, path in self.requests)

    # ------------------------------------------------------------------ what the handler asks

    def resolve(self, repo_id, revision, authorization):
        """(commit, files) of `repo_id` at `revision`, or (status, error code) when it cannot be served."""
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, "RepoNotFound"
        if repo["token"] is not None and authorization != f"Bearer {repo['token']}":
            return 401, None
        commit = repo["branches"].get(revision, revision if revision in repo["commits"] else None)
        if commit is None:
            return 404, "RevisionNotFound"
        return commit, repo["commits"][commit]


def _handler(hub):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self._serve(body=False)

        def do_GET(self):
            self._serve(body=True)

        def _serve(self, body):
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path))
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
                self._api("/".join(parts[2:4]), parts[4], parts[5], body)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._file("/".join(parts[:2]), parts[3], "/".join(parts[4:]), body)
            else:
                self._reply(404, b"not found", {"X-Error-Code": "EntryNotFound"}, body)

        def _api(self, repo_id, kind, revision, body):
            found = hub.resolve(repo_id, revision, self.headers.get("Authorization"))
            if isinstance(found[0], int):
                return self._error(*found, body)
            commit, files = found
            if kind == "revision":
                payload = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                           "siblings": [{"rfilename": name} for name in files]}
            else:
                payload = [{"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": name}
                           for name, data in files.items()]
            self._reply(200, json.dumps(payload).encode(), {"Content-Type": "application/json"}, body)

        def _file(self, repo_id, revision, filename, body):
            found = hub.resolve(repo_id, revision, self.headers.get("Authorization"))
            if isinstance(found[0], int):
                return self._error(*found, body)
            commit, files = found
            if filename not in files:
                return self._error(404, "EntryNotFound", body)
            data = files[filename]
            headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                       "Content-Type": "application/octet-stream"}
            drop = hub._drops.get((repo_id, filename))
            if body and drop is not None:
                if drop < 0:  # dropped before: the hub stays down for this file
                    return self._error(503, None, body)
                hub._drops[(repo_id, filename)] = -1
                return self._send_part(data, drop, headers)
            self._reply(200, data, headers, body)

        def _send_part(self, data, size, headers):
            self.send_response(200)
            for name, value in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data[:size])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

        def _error(self, status, code, body):
            self._reply(status, b'{"error": "refused"}', {"X-Error-Code": code} if code else {}, body)

        def _reply(self, status, data, headers, body):
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(name, value)
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler
