#!/usr/bin/python3
"""The live dashboard in a real browser: headless Chromium, driven by
Selenium, loads the page `gradmesh launch` prints while a 2-worker run trains,
and checks that the charts render, the heatmap has a cell per rank and
phase, the cost shows and the step count advances; then kills a worker and
checks that the failure and the restart reach the timeline while the run
goes on. Saves a screenshot.

usage: dashboard_browser.py GRADMESH SOURCE_DIR WORKDIR SCREENSHOT
Exit 77 (skipped) when Chromium, chromedriver or python3-selenium is missing.
"""
import os
import re
import shutil
import subprocess
import sys
import time

SKIP = 77


def main():
    gradmesh, source, workdir, screenshot = sys.argv[1:5]
    chromedriver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (shutil.which("chromium") and os.path.exists(chromedriver)):
        print("SKIP: Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
        return SKIP
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        print("SKIP: python3-selenium is not installed")
        return SKIP

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

        options = Options()
        options.add_argument("--headless=new")
        options.add_argument("--no-sandbox")
        options.add_argument("--disable-dev-shm-usage")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(chromedriver), options=options)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
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
        driver.save_screenshot(screenshot)
        print(f"screenshot: {screenshot}")
        problems = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not problems, f"no errors in the browser's console {problems}")
    finally:
        if driver:
            driver.quit()
        code = launcher.wait(120)
    check(code == 0, f"the run ended with status 0 (got {code})")
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
