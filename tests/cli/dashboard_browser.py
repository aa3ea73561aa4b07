#!/usr/bin/python3
"""The live dashboard in a real browser: headless Chromium, driven by
Selenium, loads the page `gradmesh launch` prints while a 2-worker run trains,
and checks that the charts render, the heatmap has a cell per rank and
phase, the cost shows and the step count advances; then kills a worker and
checks that the failure and the restart reach the timeline while the run
goes on; then that the end of the run reaches the page: the last step and
accuracy of metrics.jsonl, the final cost, "finished", and a stream that
ended cleanly. Saves a screenshot of the finished page.

usage: dashboard_browser.py GRADMESH SOURCE_DIR WORKDIR SCREENSHOT
       dashboard_browser.py --wide SOURCE_DIR SCREENSHOT
       dashboard_browser.py --keys PAGE.html SCREENSHOT
--wide: the page (the same file gradmesh compiles in) fed a 256-rank run with
one slow rank, from a small event server here: the heatmap keeps to 32 rows
of 8 ranks and the slow rank's group stands out.
--keys: a report or comparison page: under the page's own stylesheet, every
legend entry is drawn in its series' colour, above every point.
Exit 77 (skipped) when Chromium, chromedriver or python3-selenium is missing.
"""
import http.server
import json
import threading
import os
import re
import shutil
import subprocess
import sys
import time

SKIP = 77


CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def browser_missing():
    if not (shutil.which("chromium") and os.path.exists(CHROMEDRIVER)):
        return "Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "python3-selenium is not installed"
    return None


def open_browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.add_argument("--headless=new")
    options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    return driver


def main():
    missing = browser_missing()
    if missing:
        print("SKIP: " + missing)
        return SKIP
    if sys.argv[1] == "--wide":
        return wide(*sys.argv[2:4])
    if sys.argv[1] == "--keys":
        return keys(*sys.argv[2:4])
    gradmesh, source, workdir, screenshot = sys.argv[1:5]
    from selenium.webdriver.common.by import By

    # About 10 s of training: a wide MLP on one thread per worker, 4 epochs of
    # 50 steps, a metrics line every 5 steps, a checkpoint every 20; resumed
    # from the latest checkpoint after the restart.
    train = [gradmesh, "train", f"{source}/examples/mlp.toml", "--set", "output.dir=runs",
             "--set", "output.run_id=browser", "--set", "train.threads=1", "--set", "model.hidden=[2048,2048]",
             "--set", "train.epochs=4", "--set", "data.limit_train=6400", "--set", "data.limit_test=500",
             "--set", "train.log_every=5", "--set", "checkpoint.every_steps=20", "--set", "output.trace_steps=0",
             "--resume", "auto"]
    err = open(os.path.join(workdir, "launch.err"), "w")
    launcher = subprocess.Popen([gradmesh, "launch", "--nproc-per-node", "2", "--max-restarts", "1",
                                 "--dashboard-port", "0", "--", *train],
                                cwd=workdir, stdout=subprocess.DEVNULL, stderr=err)
    driver = None
    try:
        url = None
        for _ in range(300):
            m = re.search(r"dashboard at (http://127\.0\.0\.1:\d+/)", open(os.path.join(workdir, "launch.err")).read())
            if m:
                url = m.group(1)
                break
            time.sleep(0.05)
        check(url is not None, "the launcher printed the dashboard's address")

        driver = open_browser()
        driver.get(url)

        def step():
            text = driver.find_element(By.ID, "step").text.strip()
            return int(text) if text.isdigit() else 0

        first = wait_for(lambda: step() > 0 and step(), 60, "a first step arrived")
        later = wait_for(lambda: step() > first and step(), 60, f"the step advanced past {first}")
        print(f"step {first} then {later}")
        check(driver.find_element(By.ID, "connection").text.strip() == "live", "the event stream is live")
        for chart in ("chart-loss", "chart-throughput"):
            points = driver.execute_script(
                f"const p = document.querySelector('#{chart} svg polyline');"
                "return p ? p.getAttribute('points').trim().split(/\\s+/).length : 0;")
            check(points >= 2, f"#{chart} draws a line ({points} points)")
        cells = len(driver.find_elements(By.CSS_SELECTOR, "#heatmap svg rect.cell"))
        check(cells == 2 * 5, f"the heatmap has a cell per rank and phase ({cells})")
        # The first epoch's test accuracy, then the screenshot.
        wait_for(lambda: driver.execute_script(
            "const p = document.querySelector('#chart-accuracy svg polyline');"
            "return p && p.getAttribute('points').trim().length > 0;"), 60, "the first epoch's accuracy is drawn")
        cost = driver.find_element(By.ID, "cost-total").text
        check(re.search(r"\d", cost) is not None, f"the cost so far shows ({cost})")
        check(len(driver.find_elements(By.CSS_SELECTOR, "#timeline svg")) == 1, "the timeline is drawn")
        # A worker dies: the launcher restarts the group from the checkpoint.
        killed = kill_rank(launcher.pid, 1)
        check(killed, "found and killed rank 1's worker")
        wait_for(lambda: driver.find_element(By.ID, "generation").text.strip() == "1", 60, "generation 1 is shown")
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#timeline svg g.mark.fail"), 30,
                 "the failure is on the timeline")
        resumed = step()
        wait_for(lambda: step() > resumed + 10 and step(), 60, "the restarted run trains on")
        code = launcher.wait(120)
        check(code == 0, f"the run ended with status 0 (got {code})")
        check_the_end(driver, os.path.join(workdir, "runs/browser/metrics.jsonl"))
        driver.save_screenshot(screenshot)
        print(f"screenshot: {screenshot}")
        problems = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not problems, f"no errors in the browser's console (a stream cut short is one) {problems}")
    finally:
        if driver:
            driver.quit()
        if launcher.poll() is None:
            launcher.kill()
    return 0


def check_the_end(driver, metrics):
    """The launcher has returned: the page shows the run's last word."""
    from selenium.webdriver.common.by import By
    lines = [json.loads(line) for line in open(metrics)]
    last_step = [d for d in lines if d["type"] == "step"][-1]["step"]
    summary = [d for d in lines if d["type"] == "summary"][-1]
    epochs = len({d["epoch"] for d in lines if d["type"] == "epoch"})
    text = lambda id: driver.find_element(By.ID, id).text.strip()
    wait_for(lambda: text("connection") == "finished", 10, "the badge says finished, not reconnecting")
    check(text("phase") == "finished", f"the phase is finished ({text('phase')})")
    check(text("step") == str(last_step), f"the last step of the file is shown ({text('step')} of {last_step})")
    accuracy = f"{summary['test_accuracy'] * 100:.1f}%"
    check(text("accuracy") == accuracy, f"the final test accuracy is shown ({text('accuracy')}, {accuracy})")
    check(re.fullmatch(r"(< )?\$\d+\.\d\d", text("cost-so-far")) is not None, f"the final cost is shown ({text('cost-so-far')})")
    dots = len(driver.find_elements(By.CSS_SELECTOR, "#chart-accuracy svg > circle"))  # not a redone epoch's
    check(dots == epochs, f"the accuracy chart has a dot per epoch, the last one too ({dots} of {epochs})")
    time.sleep(4)  # longer than EventSource's retry: an ended page must not reconnect
    check(text("connection") == "finished", "the page stays finished")


def keys(page, screenshot):
    """Legend colours against series colours, as the browser computes them."""
    driver = open_browser()
    try:
        driver.get("file://" + os.path.abspath(page))
        charts = driver.execute_script("""
            return [...document.querySelectorAll('div.chart.line svg')].map((svg) => {
              const keys = [...svg.querySelectorAll('g.key:not(.note) text')].map((t) => getComputedStyle(t).fill);
              const lines = [...svg.querySelectorAll('polyline.series')].map((l) => getComputedStyle(l).stroke);
              const keyBottom = Math.max(...[...svg.querySelectorAll('g.key')].map((k) => k.getBBox().y + k.getBBox().height));
              const top = Math.min(...[...svg.querySelectorAll('polyline.series, circle')].filter((c) => !c.closest('g.key'))
                .map((c) => c.getBBox().y));
              return { title: svg.querySelector('title') ? svg.querySelector('title').textContent : '', keys, lines, keyBottom, top };
            });""")
        check(len(charts) >= 4, f"the page draws its line charts ({len(charts)})")
        for c in charts:
            check(c["keys"] and c["keys"] == c["lines"], f"{c['title']}: the keys' colours are the lines' ({c['keys']}, {c['lines']})")
            check(len(set(c["keys"])) == len(c["keys"]), f"{c['title']}: each series its own colour")
            check(c["keyBottom"] <= c["top"], f"{c['title']}: the key ({c['keyBottom']:.0f}) is above every point ({c['top']:.0f})")
        driver.save_screenshot(screenshot)
        problems = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not problems, f"no errors in the browser's console {problems}")
    finally:
        driver.quit()
    return 0


WIDE_RANKS, SLOW_RANK = 256, 203


def wide_events():
    """A 256-rank run's stream: hello, the agent, a run line, 12 intervals."""
    phases = ["data", "forward", "backward", "comm", "optimizer"]
    yield "hello", {"run_id": "wide", "node_rank": 0, "started": 1000.0, "version": "test"}
    yield "agent", {"time": 1000.0, "kind": "running", "generation": 0, "workers": 8, "restarts": 0,
                    "node_rank": 0, "message": ""}
    yield "metrics", {"type": "run", "time": 1000.5, "run_id": "wide", "model": "mlp", "parameters": 669706,
                      "world_size": WIDE_RANKS, "backend": "hier", "batch_size": 8192, "epochs": 1,
                      "steps_per_epoch": 600}
    for i in range(1, 13):
        rows = [[0.1, 1.0 + 0.01 * (r % 7), 2.0, 3.0 if r == SLOW_RANK else 0.5, 0.2] for r in range(WIDE_RANKS)]
        yield "metrics", {"type": "step", "time": 1000.0 + i, "step": 50 * i, "epoch": 0, "loss": 2.0 / i,
                          "samples_per_s": 400000.0, "phases": phases, "rank_phase_ms": rows,
                          "world_size": WIDE_RANKS, "step_ms_min": 3.8, "step_ms_max": 6.3,
                          "slowest_rank": SLOW_RANK}


def wide(source, screenshot):
    from selenium.webdriver.common.by import By
    page = open(os.path.join(source, "src/gradmesh/obs/dashboard.html"), "rb").read()
    # The served page carries the shared chart renderer where the server puts it (obs/dashboard_page.cc).
    page = page.replace(b"/* charts.js is inlined here (obs/dashboard_page.cc) */",
                        open(os.path.join(source, "src/gradmesh/obs/charts.js"), "rb").read())

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path.startswith("/events"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for name, data in wide_events():
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                time.sleep(30)  # keep the stream open: the page stays "live"
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(page)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = open_browser()
    try:
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/")
        wait_for(lambda: driver.find_element(By.ID, "step").text.strip() == "600", 30, "the last interval is shown")
        cells = driver.find_elements(By.CSS_SELECTOR, "#heatmap svg rect.cell")
        check(len(cells) == 32 * 5, f"256 ranks in 32 rows of 5 phases ({len(cells)} cells)")
        text = driver.find_element(By.ID, "heatmap").text
        check("ranks 200-207" in text, "the rows are groups of 8 ranks, labelled")
        # The slow rank's group: its comm cell is the darkest one.
        darkest = driver.execute_script("""
            const cells = [...document.querySelectorAll('#heatmap svg rect.cell')];
            const lum = c => { const m = getComputedStyle(c).fill.match(/\\d+/g).map(Number);
                               return m[0] + m[1] + m[2]; };
            let best = 0;
            cells.forEach((c, i) => { if (lum(c) < lum(cells[best])) best = i; });
            return best;""")
        check(darkest == (SLOW_RANK // 8) * 5 + 3, f"the darkest cell is ranks 200-207's comm (cell {darkest})")
        driver.save_screenshot(screenshot)
        print(f"screenshot: {screenshot}")
        problems = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not problems, f"no errors in the browser's console {problems}")
    finally:
        driver.quit()
        server.shutdown()
    return 0


def kill_rank(launcher_pid, rank):
    """SIGKILLs the launcher's worker whose environment says RANK=`rank`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if parent == launcher_pid and f"RANK={rank}".encode() in env:
            os.kill(int(pid), 9)
            return True
    return False


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what, flush=True)
    if not condition:
        raise SystemExit(1)


def wait_for(condition, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception:  # the page may be re-rendering the element
            pass
        time.sleep(0.1)
    check(False, what)


if __name__ == "__main__":
    sys.exit(main())
