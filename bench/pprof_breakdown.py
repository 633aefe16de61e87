#!/usr/bin/env python3
"""Where kube-apiserver's CPU went: reads `go tool pprof -traces PROFILE` on stdin and sums
each sampled stack into the first category whose pattern matches one of its frames (the order
matters: a status write is also an update, a filter frame sits under every request). Prints a
Markdown table, largest first."""
import collections
import re
import sys

CATEGORIES = [
    ("garbage collector (background marking)", r"runtime\.gcBgMarkWorker"),
    ("audit log", r"audit/log"),
    ("custom resource status writes (AddonsLayer, OCIRepository)", r"customresource\.\(\*StatusREST\)\.Update"),
    ("server-side apply and patches (any other object)", r"applyPatcher|\(\*patcher\)\.patchResource"),
    ("built-in status writes (Deployment, ReplicaSet)", r"(deployment|replicaset)/storage\.\(\*StatusREST\)\.Update"),
    ("other updates", r"handlers\.UpdateResource"),
    ("creates", r"handlers\.CreateResource|createHandler"),
    ("gets", r"handlers\.GetResource|getResourceHandler"),
    ("lists", r"ListResource"),
    ("watches", r"serveWatch|WatchServer|cacher|watchCache|cacheWatcher"),
    ("etcd client (outside a request)", r"etcd3|grpc"),
    ("authorization", r"withAuthorization"),
    ("authentication and impersonation", r"withAuthentication|WithImpersonation"),
    ("HTTP/2 and TLS", r"http2|crypto/tls"),
    ("flow control and other filters", r"flowcontrol|priorityAndFairness|WithAudit|otelhttp|timeoutHandler"),
]


def millis(value: str) -> float:
    match = re.match(r"([\d.]+)(ms|s)", value)
    return float(match.group(1)) * (1 if match.group(2) == "ms" else 1000) if match else 0.0


def main() -> None:
    text = sys.stdin.read()
    by_category: collections.Counter = collections.Counter()
    total = 0.0
    for block in text.split("-----------+-------------------------------------------------------")[1:]:
        lines = [line.strip() for line in block.strip("\n").split("\n") if line.strip()]
        if not lines or len(lines[0].split(None, 1)) < 2:
            continue
        spent, leaf = lines[0].split(None, 1)
        spent_ms = millis(spent)
        total += spent_ms
        stack = "\n".join([leaf] + lines[1:])
        name = next((n for n, rx in CATEGORIES if re.search(rx, stack)), "other")
        by_category[name] += spent_ms
    if total == 0:
        sys.exit("no samples in the profile")
    print("| where | CPU | share |")
    print("|---|---:|---:|")
    for name, spent_ms in by_category.most_common():
        print(f"| {name} | {spent_ms / 1000:.1f} s | {100 * spent_ms / total:.0f} % |")
    print(f"| **sampled** | {total / 1000:.1f} s | 100 % |")


if __name__ == "__main__":
    main()
