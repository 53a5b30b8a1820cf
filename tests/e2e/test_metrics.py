"""GET /metrics (workflows.md section 6, docs/operations.md "Metrics"), through the real binary.

Starts `$CODESPACE_MCP_BIN --http --port 0 --metrics --token T --processes shared` (with
`--runner $CS_E2E_RUNNER` when that is set), makes a known mix of tool calls from several threads
(successes and errors, several tools, a few exec_command) while another thread scrapes /metrics,
and parses every page with Prometheus's own text parser (python3-prometheus-client,
prometheus_client.parser.text_string_to_metric_families), never a regex. Checks:

- codespace_tool_calls_total{tool,result} grew by exactly the calls the clients made, by the
  result each client saw (ok or the error code); no counter ever went down between scrapes;
- the histogram codespace_tool_call_duration_seconds: per tool, _count grew by the calls made,
  +Inf equals _count, the buckets are cumulative (never decreasing with le);
- codespace_processes_live goes up by one while a `sleep` runs and back after terminate_process;
- the sandbox denial and runner reconnect series are present with their types; with
  CS_E2E_RUNNER=uds, a SIGKILLed worker drops its process from the live gauge and its
  replacement counts one reconnect;
- 401 without (or with a wrong) bearer token; 404 for /metrics without --metrics; --metrics with
  the stdio transport refused at start (exit 2, naming the flag).

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_metrics          (from tests/e2e/)
"""

import collections
import json
import os
import signal
import subprocess
import threading
import time
import unittest

import mcp_stdio
import test_http

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # scripts/bootstrap.sh installs python3-prometheus-client
    text_string_to_metric_families = None

TOKEN = "metrics-t0ken"
FAKE_PROC = "proc-00000000-0000-4000-8000-000000000000"
THREADS = 4
ROUNDS = 6


def parse(text):
    """{(sample name, frozenset(labels)): value} and {family name: type} of one page."""
    samples, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            if key in samples:
                raise AssertionError("sample %r twice" % (key,))
            samples[key] = s.value
    return samples, types


def calls_by(samples):
    """{(tool, result): count} from codespace_tool_calls_total."""
    out = collections.Counter()
    for (name, labels), v in samples.items():
        if name == "codespace_tool_calls_total":
            d = dict(labels)
            out[(d["tool"], d["result"])] = v
    return out


def hist(samples, tool):
    """(buckets [(le, value)] sorted by le, sum, count) of one tool's histogram."""
    buckets, total, count = [], None, None
    for (name, labels), v in samples.items():
        d = dict(labels)
        if d.get("tool") != tool:
            continue
        if name == "codespace_tool_call_duration_seconds_bucket":
            buckets.append((float(d["le"]), v))
        elif name == "codespace_tool_call_duration_seconds_sum":
            total = v
        elif name == "codespace_tool_call_duration_seconds_count":
            count = v
    buckets.sort()
    return buckets, total, count


def value(samples, name):
    return samples[(name, frozenset())]


class TestMetrics(test_http.HttpCase):
    auth = "Bearer " + TOKEN

    @classmethod
    def setUpClass(cls):
        if text_string_to_metric_families is None:  # a missing parser fails, never skips
            raise AssertionError("python3-prometheus-client is not installed "
                                 "(scripts/bootstrap.sh installs it)")
        cls.server = test_http.Server("--token", TOKEN, "--metrics", "--processes", "shared")
        with open(os.path.join(cls.server.tmp.name, "hello.txt"), "w") as f:
            f.write("hello\n")

    @classmethod
    def tearDownClass(cls):
        if cls.server:
            cls.server.stop()

    def scrape(self, auth=True):
        r = self.request("GET", "/metrics", headers=None if auth else {"Authorization": None})
        self.assertEqual(r.status, 200, r.body)
        self.assertTrue((r.header("Content-Type") or "").startswith("text/plain"),
                        r.header("Content-Type"))
        return parse(r.body.decode("utf-8"))

    def result_of(self, sid, name, args):
        res = self.call_tool(sid, name, args)
        if res.get("isError"):
            return json.loads(res["content"][0]["text"])["code"], None
        return "ok", res.get("structuredContent")

    # ---- the load ----

    def mix(self, sid):
        """One round of calls; yields (tool, result) as the client saw each."""
        calls = [
            ("workspace_info", {}),
            ("workspace_info", {"workspace_id": "nope"}),
            ("workspace_info", {"workspace_id": 5}),
            ("read", {"workspace_id": "default", "path": "hello.txt"}),
            ("read", {"workspace_id": "default", "path": "missing.txt"}),
            ("find", {"workspace_id": "default", "pattern": "hello"}),
            ("process_status", {"process_id": FAKE_PROC}),
            ("exec_command", {"workspace_id": "default", "command": ["true"], "yield_ms": 5000}),
        ]
        for name, args in calls:
            yield (name, self.result_of(sid, name, args)[0])

    def test_counters_match_the_calls_under_load(self):
        before, types = self.scrape()
        self.assertEqual(types.get("codespace_tool_call_duration_seconds"), "histogram")
        self.assertEqual(types.get("codespace_processes_live"), "gauge")
        base = calls_by(before)
        made = collections.Counter()
        lock = threading.Lock()
        errors = []
        stop = threading.Event()
        pages = []

        def client():
            try:
                sid = self.session()
                for _ in range(ROUNDS):
                    for key in self.mix(sid):
                        with lock:
                            made[key] += 1
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        def scraper():
            try:
                while not stop.is_set():
                    pages.append(self.scrape()[0])
                    time.sleep(0.02)
            except BaseException as e:
                errors.append(e)

        s = threading.Thread(target=scraper)
        s.start()
        workers = [threading.Thread(target=client) for _ in range(THREADS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        stop.set()
        s.join(30)
        if errors:
            raise errors[0]
        after, _ = self.scrape()
        pages.append(after)
        self.assertGreaterEqual(len(pages), 3, "scraped while the calls ran")

        # Several tools, both successes and errors, were made.
        self.assertGreaterEqual(len({t for t, _ in made}), 5, made)
        self.assertTrue(any(r == "ok" for _, r in made) and any(r != "ok" for _, r in made))
        self.assertEqual(made[("exec_command", "ok")], THREADS * ROUNDS, made)

        # Counters: exactly the calls made, per tool and result.
        grown = calls_by(after)
        grown.subtract(base)
        self.assertEqual({k: v for k, v in grown.items() if v}, dict(made))

        # No counter ever went down between two scrapes; each page's histograms are sound.
        prev = calls_by(before)
        for page in pages:
            cur = calls_by(page)
            for k, v in prev.items():
                self.assertGreaterEqual(cur.get(k, 0), v, k)
            prev = cur
            for tool in {t for t, _ in cur}:
                self.check_histogram(page, tool)

        # The histogram's count grew by the calls made per tool, and in all by the total.
        total = 0
        for tool in {t for t, _ in made}:
            _, _, c1 = hist(after, tool)
            _, _, c0 = hist(before, tool)
            n = sum(v for (t, _), v in made.items() if t == tool)
            self.assertEqual(c1 - (c0 or 0), n, tool)
            total += c1 - (c0 or 0)
        self.assertEqual(total, sum(made.values()))
        calls_total = sum(calls_by(after).values())
        hist_total = sum(v for (name, _), v in after.items()
                         if name == "codespace_tool_call_duration_seconds_count")
        self.assertEqual(hist_total, calls_total)

    def check_histogram(self, page, tool):
        buckets, total, count = hist(page, tool)
        self.assertGreater(len(buckets), 2, tool)
        self.assertEqual(buckets[-1][0], float("inf"), tool)
        self.assertEqual(buckets[-1][1], count, tool)
        values = [v for _, v in buckets]
        self.assertEqual(values, sorted(values), "cumulative buckets for %s" % tool)
        self.assertIsNotNone(total)
        self.assertGreaterEqual(total, 0)
        self.assertEqual(count, sum(v for (t, _), v in calls_by(page).items() if t == tool),
                         "histogram count of %s against its calls" % tool)

    def test_live_processes_follow_a_running_sleep(self):
        base = value(self.scrape()[0], "codespace_processes_live")
        sid = self.session()
        res, out = self.result_of(sid, "exec_command",
                                  {"workspace_id": "default", "command": ["sleep", "60"],
                                   "yield_ms": 100})
        self.assertEqual(res, "ok", out)
        pid = out["process_id"]
        self.assertEqual(value(self.scrape()[0], "codespace_processes_live"), base + 1)
        res, out = self.result_of(sid, "terminate_process", {"process_id": pid})
        self.assertEqual(res, "ok", out)
        end = time.monotonic() + 10
        while value(self.scrape()[0], "codespace_processes_live") != base:
            self.assertLess(time.monotonic(), end, "live processes did not come back down")
            time.sleep(0.05)

    def test_other_series_present(self):
        samples, types = self.scrape()
        self.assertEqual(types.get("codespace_sandbox_denials"), "counter")
        self.assertEqual(types.get("codespace_runner_reconnects"), "counter")
        for kind in ("network", "syscall", "filesystem"):
            self.assertGreaterEqual(
                samples[("codespace_sandbox_denials_total", frozenset({("kind", kind)}))], 0)
        self.assertEqual(value(samples, "codespace_runner_reconnects_total"), 0)

    def test_denials_counted_once_per_entry(self):
        """A refused unshare, carried by three answers, counts once (as it is logged once)."""
        start = [json.loads(line) for line in self.server.log().splitlines()
                 if '"starting"' in line][0]
        key = ("codespace_sandbox_denials_total", frozenset({("kind", "syscall")}))
        base = self.scrape()[0][key]
        sid = self.session()
        res, out = self.result_of(sid, "exec_command", {
            "workspace_id": "default", "command": ["sh", "-c", "unshare -U true 2>/dev/null"],
            "yield_ms": 5000})
        self.assertEqual(res, "ok", out)
        self.assertEqual(out["state"], "exited", out)
        for _ in range(2):
            self.assertEqual(self.result_of(sid, "process_status",
                                            {"process_id": out["process_id"]})[0], "ok")
        got = self.scrape()[0][key] - base
        logged = [line for line in self.server.log().splitlines()
                  if '"sandbox denial"' in line and out["process_id"] in line]
        self.assertEqual(got, len(logged))
        if start["command_sandbox"] == "linux-sandbox":
            self.assertEqual(got, 1, logged)
        else:
            self.assertEqual(got, 0)

    def test_token_required(self):
        r = self.request("GET", "/metrics", headers={"Authorization": None})
        self.assertEqual(r.status, 401)
        r = self.request("GET", "/metrics", headers={"Authorization": "Bearer wrong"})
        self.assertEqual(r.status, 401)
        self.assertNotIn(b"codespace_", r.body)

    def test_get_only(self):
        r = self.request("POST", "/metrics", body="{}")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("Allow"), "GET")


class TestMetricsUdsWorkerLost(test_http.HttpCase):
    """--runner uds only (e2e_metrics_uds): a SIGKILLed worker takes its running process with it
    (live back down) and the next call starts a new one (reconnects up by one)."""

    auth = "Bearer " + TOKEN

    def setUp(self):
        if os.environ.get("CS_E2E_RUNNER") != "uds":
            self.skipTest("the uds runner's worker replacement (e2e_metrics_uds)")
        if text_string_to_metric_families is None:
            raise AssertionError("python3-prometheus-client is not installed")
        self.server = test_http.Server("--token", TOKEN, "--metrics")
        self.addCleanup(self.server.stop)

    def metric(self, name):
        r = self.request("GET", "/metrics")
        self.assertEqual(r.status, 200, r.body)
        return value(parse(r.body.decode("utf-8"))[0], name)

    def test_worker_replaced_counts_a_reconnect(self):
        import test_uds  # its helpers find the gateway's worker

        self.assertEqual(self.metric("codespace_runner_reconnects_total"), 0)
        sid = self.session()
        out = self.call_tool(sid, "exec_command", {"workspace_id": "default",
                                                   "command": ["sleep", "60"], "yield_ms": 100})
        self.assertFalse(out.get("isError"), out)
        self.assertEqual(self.metric("codespace_processes_live"), 1)
        workers = test_uds.worker_of(self.server.proc.pid)
        self.assertEqual(len(workers), 1, workers)
        os.kill(workers[0], signal.SIGKILL)
        end = time.monotonic() + 10
        while self.metric("codespace_processes_live") != 0:
            self.assertLess(time.monotonic(), end, "the lost worker's process still counted")
            time.sleep(0.05)
        self.assertEqual(self.metric("codespace_runner_reconnects_total"), 0)
        # The next call that reaches the runner (find; workspace_info is answered by the gateway)
        # starts a new worker (docs/runner.md): one reconnect.
        end = time.monotonic() + 10
        while True:
            self.call_tool(sid, "find", {"workspace_id": "default", "pattern": "x"})
            if self.metric("codespace_runner_reconnects_total") == 1:
                break
            self.assertLess(time.monotonic(), end, "no reconnect counted")
            time.sleep(0.2)
        self.assertEqual(len(test_uds.worker_of(self.server.proc.pid)), 1)


class TestMetricsOff(test_http.HttpCase):
    auth = "Bearer " + TOKEN

    @classmethod
    def setUpClass(cls):
        cls.server = test_http.Server("--token", TOKEN)

    @classmethod
    def tearDownClass(cls):
        if cls.server:
            cls.server.stop()

    def test_404_without_the_flag(self):
        r = self.request("GET", "/metrics")
        self.assertEqual(r.status, 404)
        self.assertNotIn(b"codespace_", r.body)

    def test_stdio_refuses_metrics(self):
        env = dict(os.environ)
        env.pop("CODESPACE_TRANSPORT", None)
        env["CODESPACE_OPERATIONS_DB"] = ":memory:"
        p = subprocess.run([os.environ["CODESPACE_MCP_BIN"], "--metrics",
                            *mcp_stdio.runner_args()], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"--metrics", p.stderr)
        self.assertIn(b"HTTP", p.stderr)


if __name__ == "__main__":
    unittest.main()
