"""The Dagster UI in a real headless browser: the global asset lineage shows every stage group and the
report, and the raw_ohlcv contract's asset checks are listed.

Starts ``dagster-webserver -w workspace.yaml`` from the repository root (ci profile, a temporary
DAGSTER_HOME and warehouse), then drives Debian's Chromium through chromedriver (Selenium).
Install the browser with ``bash .ci/install_browser.sh``. Screenshots go to
``$KP_UI_SCREENSHOT_DIR`` when set (CI keeps them under its warehouse, and there a missing browser is a
failure, not a skip), else to ``<tmp warehouse>/reports/ui``.

With ``KP_UI_INSTANCE=1`` the webserver serves the *current* environment's instance instead
(``$DAGSTER_HOME`` and ``$KP_WAREHOUSE`` as exported, its dagster.yaml untouched, ``--read-only``):
the one CI has just materialized the whole DAG into. The same tests then run against it, and so do the
metadata tests below (skipped otherwise): the asset pages of ``figures``, ``paper_tables`` and
``backtests`` show their latest materialization's Markdown metadata, the figures as embedded PNGs that
decode in the browser and the paper's tables as rendered tables.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from kinematic_pipeline.orchestration.checks import QUALITY_CHECKS, RAW_CHECKS
from kinematic_pipeline_tests.conftest import cli
from kinematic_pipeline_tests.helpers import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

REPO_ROOT = ROOT
STAGE_GROUPS = ("ingest", "tokenize", "corpus", "pretrain", "finetune", "evaluate", "report")
# Asset nodes the expanded graph shows at its opening zoom (with every variant's evaluation assets the graph is
# larger than the viewport, and a zoomed-out graph draws nodes without their names).
KEY_ASSETS = ("raw_ohlcv", "splinegpt_adapter", "splinegpt_predictions", "report")
# The groups of KEY_ASSETS, opened by URL: with the baselines' assets beside the models' the graph with every group
# open is zoomed out too far for node names; the other groups stay boxes.
KEY_GROUPS = ("ingest", "finetune", "evaluate", "report")
VIEWPORT = (1600, 1000)
SERVER_TIMEOUT_S = 120  # webserver up and the code location loaded (10-20 s on a 2-core machine)
RENDER_TIMEOUT_S = 60  # a page's data fetched and the graph laid out
SCREENSHOT_ENV = "KP_UI_SCREENSHOT_DIR"
INSTANCE_ENV = "KP_UI_INSTANCE"
USE_INSTANCE = os.environ.get(INSTANCE_ENV) == "1"
# The UI's first-visit "Join the Dagster community" dialog remembers its dismissal in this localStorage
# key; setting it keeps the dialog away without the instance's dagster.yaml (``nux: enabled: false``).
NUX_STORAGE_KEY = "communityNux"
NUX_DIALOG_JS = """
const nux = Array.from(document.querySelectorAll('[role=dialog]'))
  .find(d => (d.innerText || '').includes('Join the Dagster community'));
return nux ? Array.from(nux.querySelectorAll('button')).find(b => b.innerText.trim() === 'Skip') || nux : null;
"""
requires_instance = pytest.mark.skipif(
    not USE_INSTANCE, reason=f"needs a materialized instance: set {INSTANCE_ENV}=1 with DAGSTER_HOME and KP_WAREHOUSE"
)

LATEST_MATERIALIZATION_QUERY = """
query Latest($path: [String!]!) { assetOrError(assetKey: {path: $path}) { __typename ... on Asset {
  assetMaterializations(limit: 1) { runId partition
  metadataEntries { label __typename ... on MarkdownMetadataEntry { mdStr } } } } } }
"""

LOCATION_STATUS_QUERY = """
{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""


def _log_tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no webserver log>"
    return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _http(url: str, body: dict | None = None, timeout: float = 5.0) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _instance_yaml(warehouse: Path) -> dict:
    """The repository's dagster.yaml with its storage moved into the temporary warehouse: its
    ``warehouse/...`` base_dirs are relative to the working directory, which is the repository root.
    The first-visit "Join the Dagster community" dialog (nux) is switched off: it would cover the graph."""
    config = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text()) or {}
    for section in config.values():
        if isinstance(section, dict) and isinstance(section.get("config"), dict):
            base_dir = section["config"].get("base_dir")
            if isinstance(base_dir, str) and not os.path.isabs(base_dir):
                relative = Path(base_dir)
                if relative.parts and relative.parts[0] == "warehouse":
                    relative = Path(*relative.parts[1:])
                section["config"]["base_dir"] = str(warehouse / relative)
    config["nux"] = {"enabled": False}
    return config


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the webserver's whole process group (it spawns a gRPC code server), then kill what is left."""
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)  # the group outlives its leader while the code server runs
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


def _wait_for_webserver(proc: subprocess.Popen, base_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_TIMEOUT_S
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dagster-webserver exited with {proc.returncode}; log tail:\n{_log_tail(log_path)}")
        try:
            info = json.loads(_http(f"{base_url}/server_info"))
            status = json.loads(_http(f"{base_url}/graphql", {"query": LOCATION_STATUS_QUERY}))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last_error = repr(exc)
            time.sleep(0.5)
            continue
        workspace = (status.get("data") or {}).get("workspaceOrError") or {}
        entries = workspace.get("locationEntries") or []
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            errors = [e for e in entries if (e.get("locationOrLoadError") or {}).get("__typename") == "PythonError"]
            if errors:
                pytest.fail(
                    "the code location failed to load:\n"
                    + "\n".join(f"{e['name']}: {e['locationOrLoadError']['message']}" for e in errors)
                    + f"\nlog tail:\n{_log_tail(log_path)}"
                )
            assert info.get("dagster_webserver_version")
            return
        last_error = f"workspace not loaded yet: {workspace}"
        time.sleep(0.5)
    pytest.fail(
        f"dagster-webserver did not answer /server_info with a loaded code location within {SERVER_TIMEOUT_S} s "
        f"({last_error}); log tail:\n{_log_tail(log_path)}"
    )


def _find_browser() -> tuple[str, str] | None:
    chromium = next(
        (p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None
    )
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory) -> Path:
    configured = os.environ.get(SCREENSHOT_ENV)
    path = Path(configured) if configured else tmp_path_factory.mktemp("warehouse") / "reports" / "ui"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _current_instance_env() -> dict[str, str]:
    """The environment as exported (``KP_UI_INSTANCE=1``): its DAGSTER_HOME, KP_WAREHOUSE and profile are
    the ones the DAG was materialized with."""
    env = dict(os.environ)
    home = env.get("DAGSTER_HOME")
    if not home or not Path(home).is_dir():
        pytest.fail(f"{INSTANCE_ENV}=1 needs DAGSTER_HOME set to the materialized instance's folder (got {home!r})")
    if not env.get("KP_WAREHOUSE"):
        pytest.fail(f"{INSTANCE_ENV}=1 needs KP_WAREHOUSE set to the warehouse the DAG was materialized into")
    return env


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    """``dagster-webserver -w workspace.yaml`` on a free localhost port; yields its base URL and log path."""
    command = [cli("dagster-webserver")]
    port = _free_port()
    command += ["-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]
    if USE_INSTANCE:
        # The real instance, read-only: nothing clicked in the browser can launch, re-execute or delete runs.
        env = _current_instance_env()
        command.append("--read-only")
        log_path = tmp_path_factory.mktemp("webserver") / "webserver.log"
    else:
        home = tmp_path_factory.mktemp("dagster_home")
        warehouse = tmp_path_factory.mktemp("ui_warehouse")
        (home / "dagster.yaml").write_text(yaml.safe_dump(_instance_yaml(warehouse), sort_keys=False))
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KP_SOURCE", "KP_SOURCE_PATH", "KP_START_DATE", "KP_END_DATE")
        }
        env.update(DAGSTER_HOME=str(home), KP_PROFILE="ci", KP_WAREHOUSE=str(warehouse))
        log_path = home / "webserver.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_for_webserver(proc, base_url, log_path)
        yield base_url, log_path
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def browser():
    found = _find_browser()
    if found is None:
        message = "headless Chromium and chromedriver are not installed: run `bash .ci/install_browser.sh`"
        if os.environ.get(SCREENSHOT_ENV):
            pytest.fail(message)
        pytest.skip(message)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        if os.environ.get(SCREENSHOT_ENV):
            raise
        pytest.skip("selenium is not installed: pip install -c constraints.txt -e '.[dev]'")
    chromium, chromedriver = found
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        # The viewport itself, not the window, is 1600x1000: the screenshot's size.
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False},
        )
        driver.set_page_load_timeout(RENDER_TIMEOUT_S)
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def ui(browser, webserver):
    """The browser on the webserver's origin with the community dialog (nux) marked as seen."""
    base_url, log_path = webserver
    browser.get(f"{base_url}/server_info")  # any page of the origin: localStorage is per origin
    browser.execute_script("window.localStorage.setItem(arguments[0], JSON.stringify('1'));", NUX_STORAGE_KEY)
    return browser, base_url, log_path


def _screenshot(driver, path: Path, min_bytes: int = 20_000) -> None:
    """Save the viewport once the community dialog, should it open despite the localStorage key (it opens
    a second after the page), is skipped."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        nux = driver.execute_script(NUX_DIALOG_JS)
        if not nux:
            break
        driver.execute_script("arguments[0] && arguments[0].click();", nux)
        time.sleep(0.5)
    assert driver.save_screenshot(str(path)), f"could not write {path}"
    assert path.stat().st_size > min_bytes, f"{path} looks empty"


def _shown(name: str, texts: list[str]) -> bool:
    """``name`` is among the labels, whole or middle-truncated the way the UI shortens long names
    (``spline…_foundation``)."""
    for text in texts:
        if text == name:
            return True
        head, sep, tail = text.partition("…")
        if sep and head and name.startswith(head) and name.endswith(tail) and len(head) + len(tail) < len(name):
            return True
    return False


def _graph_labels(driver) -> list[str]:
    """Every line of text on the lineage graph's nodes: group boxes and asset nodes (SVG foreignObjects)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('svg foreignObject'))"
        ".flatMap(e => Array.from(e.children).flatMap(c => (c.innerText || '').split('\\n'))).map(s => s.trim()).filter(Boolean);"
    )


def _page_lines(driver) -> list[str]:
    return [line.strip() for line in driver.execute_script("return document.body.innerText;").splitlines()]


def _wait_until(driver, predicate, what: str, log_path: Path, timeout: float = RENDER_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
        except Exception as exc:  # the page is re-rendering: stale nodes, script errors mid-navigation
            result, last_error = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            shown = " | ".join(line for line in _page_lines(driver) if line)[:3000]
            pytest.fail(
                f"{what} not shown within {timeout:.0f} s at {driver.current_url} (last error: {last_error!r})\n"
                f"page text: {shown}\n"
                f"webserver log tail:\n{_log_tail(log_path)}"
            )
        time.sleep(0.25)


def _missing(names, texts) -> list[str]:
    return [n for n in names if not _shown(n, texts)]


def test_asset_graph_shows_every_stage_group_and_the_report(ui, screenshot_dir):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    browser, base_url, log_path = ui
    browser.get(f"{base_url}/asset-groups")  # "Lineage": the global asset lineage graph
    _wait_until(
        browser,
        lambda: not _missing(STAGE_GROUPS, _graph_labels(browser)),
        f"the lineage graph's stage groups {STAGE_GROUPS}",
        log_path,
    )
    # The groups render as collapsed boxes; Alt+E is the graph's "expand all groups" shortcut.
    ActionChains(browser).key_down(Keys.ALT).send_keys("e").key_up(Keys.ALT).perform()
    deadline = time.monotonic() + 15
    while _missing(KEY_ASSETS, _graph_labels(browser)) and time.monotonic() < deadline:
        time.sleep(0.25)
    if _missing(KEY_ASSETS, _graph_labels(browser)):  # the shortcut did not take: open the groups by URL
        expanded = ",".join(f"global@global:{group}" for group in KEY_GROUPS)
        browser.get(f"{base_url}/asset-groups?expanded={urllib.request.quote(expanded)}")
    labels = _wait_until(
        browser,
        lambda: (found := _graph_labels(browser)) and not _missing(KEY_ASSETS, found) and found,
        f"the assets {KEY_ASSETS} in the expanded lineage graph",
        log_path,
    )
    # The expanded graph opens zoomed in and crops the bottom rows: one step out shows more of it.
    zoom_out = browser.find_elements("css selector", '[aria-label="zoom_out"]')
    if zoom_out:
        browser.execute_script("arguments[0].closest('button').click();", zoom_out[0])
    time.sleep(1.5)  # the zoom animation and the edges' final layout pass before the picture
    _screenshot(browser, screenshot_dir / "asset_graph.png")

    assert not _missing(STAGE_GROUPS, labels), f"stage groups missing from the graph: {_missing(STAGE_GROUPS, labels)}"
    assert not _missing(KEY_ASSETS, labels), f"assets missing from the graph: {_missing(KEY_ASSETS, labels)}"
    assert "report" in labels and labels.count("report") >= 2, "the report group box and the report asset node"
    assert "Global asset lineage" in _page_lines(browser)


def test_raw_ohlcv_asset_checks_are_listed(ui, screenshot_dir):
    browser, base_url, log_path = ui
    names = [name for name, _ in RAW_CHECKS + QUALITY_CHECKS]  # the blocking contract and the warning checks
    browser.get(f"{base_url}/assets/raw_ohlcv?view=checks")
    lines = _wait_until(
        browser,
        lambda: (
            (found := _page_lines(browser))
            and f"Checks ({len(names)})" in found
            and not _missing(names, found)
            and found
        ),
        f"the raw_ohlcv asset checks {names}",
        log_path,
    )
    assert not _missing(names, lines)
    assert any(re.fullmatch(r"This is a blocking asset check\.?", line) for line in lines), "blocking checks"
    _screenshot(browser, screenshot_dir / "raw_ohlcv_checks.png")


# --- The latest materialization's metadata on the asset pages (KP_UI_INSTANCE=1) -----------------------

FIGURE_KEYS = ("kinematic_manifold", "equity_curves")  # the last one stays open for the screenshot
TABLE_KEYS = ("risk_adjusted", "absolute_performance")
METRICS_KEY = re.compile(r"metrics_at_[\d.]+_bps")
SHOW_MARKDOWN = "[Show Markdown]"  # Markdown of 1000 characters or more; shorter renders inline

# The value cell of the row ``key`` in the asset page's metadata table (Key | Timestamp | Value); or every
# key when called without one. ``table.rows`` leaves out the rows of tables rendered inside the cells.
METADATA_ROWS_JS = """
const key = arguments[0];
const keys = [];
for (const table of document.querySelectorAll('table')) {
  const head = table.rows[0];
  if (!head || head.cells.length < 2 || head.cells[0].innerText.trim() !== 'Key') continue;
  for (const row of Array.from(table.rows).slice(1)) {
    const name = row.cells.length >= 2 ? row.cells[0].innerText.trim() : '';
    if (key && name === key) return row.cells[row.cells.length - 1];
    if (name) keys.push(name);
  }
}
return key ? null : keys;
"""
# The open dialog titled ``key`` (the metadata entry's label), not the community nux or another dialog.
DIALOG_JS = """
return Array.from(document.querySelectorAll('[role=dialog]')).find(d => {
  const header = d.querySelector('[class*=dialogHeaderText]');
  return (header ? header.innerText : (d.innerText || '').split('\\n')[0]).trim() === arguments[0];
}) || null;
"""
IMAGES_JS = """
return Array.from(arguments[0].querySelectorAll('img')).map(i => ({
  alt: i.alt, complete: i.complete, naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight,
  width: i.getBoundingClientRect().width, isPng: i.src.startsWith('data:image/png;base64,'),
  same: i.src === arguments[1], srcLength: i.src.length}));
"""
TABLE_JS = """
const t = arguments[0].querySelector('table');
return t && {rows: t.rows.length, header: Array.from(t.rows[0].cells).map(c => c.innerText.trim()),
             width: t.getBoundingClientRect().width};
"""


def _latest_metadata(base_url: str, asset: str) -> tuple[dict, dict[str, str | None]]:
    """The asset's latest materialization (GraphQL, the instance the page reads) and its metadata:
    label -> Markdown source (None for other kinds)."""
    body = {"query": LATEST_MATERIALIZATION_QUERY, "variables": {"path": [asset]}}
    result = json.loads(_http(f"{base_url}/graphql", body, timeout=60))
    node = (result.get("data") or {}).get("assetOrError") or {}
    events = node.get("assetMaterializations") or []
    if not events:
        pytest.fail(f"no {asset} materialization in DAGSTER_HOME={os.environ.get('DAGSTER_HOME')}: {result}")
    latest = events[0]
    return latest, {e["label"]: e.get("mdStr") for e in latest["metadataEntries"]}


def _open_asset_metadata(driver, base_url: str, asset: str, labels, log_path: Path) -> list[str]:
    """The asset's overview page once its metadata table lists every label of the latest materialization."""
    driver.get(f"{base_url}/assets/{asset}")
    keys = _wait_until(
        driver,
        lambda: (found := driver.execute_script(METADATA_ROWS_JS, None)) and set(labels) <= set(found) and found,
        f"the {asset} metadata keys {sorted(labels)}",
        log_path,
    )
    first = driver.execute_script(METADATA_ROWS_JS, keys[0])
    driver.execute_script("arguments[0].closest('table').scrollIntoView({block: 'start'});", first)
    return keys


def _rendered_markdown(driver, key: str, log_path: Path):
    """The element holding the rendered Markdown of metadata entry ``key``: its table cell when rendered
    inline, else the dialog that ``[Show Markdown]`` opens. Returns (element, dialog or None)."""
    cell = _wait_until(
        driver, lambda: driver.execute_script(METADATA_ROWS_JS, key), f"the metadata row {key}", log_path
    )
    links = [a for a in cell.find_elements("tag name", "a") if a.text.strip() == SHOW_MARKDOWN]
    if not links:
        return cell, None
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click();", links[0])
    dialog = _wait_until(
        driver, lambda: driver.execute_script(DIALOG_JS, key), f"the {key} Markdown dialog", log_path, timeout=15
    )
    markdown = dialog.find_elements("css selector", ".dagster-markdown")
    return (markdown[0] if markdown else dialog), dialog


def _close(driver, dialog, key: str, log_path: Path) -> None:
    buttons = [b for b in dialog.find_elements("tag name", "button") if b.text.strip() == "Close"]
    assert buttons, f"the {key} dialog has no Close button"
    buttons[0].click()
    _wait_until(driver, lambda: not driver.execute_script(DIALOG_JS, key), f"the {key} dialog closed", log_path, 15)


def _markdown_table(markdown: str) -> tuple[list[str], int]:
    """The header cells and the number of rows (header included) of the first table in ``markdown``."""
    lines = [line.strip() for line in markdown.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    assert start is not None, f"no Markdown table in {markdown[:200]!r}"
    block = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    header = [cell.strip() for cell in block[0].strip("|").split("|")]
    return header, len(block) - 1  # less the |---| separator


def _decoded_images(driver, element, src: str, key: str, log_path: Path) -> list[dict]:
    """The <img> elements under ``element`` once the browser has loaded (decoded or failed) every one."""
    return _wait_until(
        driver,
        lambda: (imgs := driver.execute_script(IMAGES_JS, element, src)) and all(i["complete"] for i in imgs) and imgs,
        f"the {key} image loaded",
        log_path,
        timeout=30,
    )


def _assert_rendered_table(driver, key: str, markdown: str | None, log_path: Path):
    assert markdown is not None, f"metadata entry {key} is not Markdown"
    header, rows = _markdown_table(markdown)
    element, dialog = _rendered_markdown(driver, key, log_path)
    table = _wait_until(
        driver, lambda: driver.execute_script(TABLE_JS, element), f"the rendered {key} table", log_path, timeout=15
    )
    assert table["header"] == header, f"{key}: rendered header {table['header']} != Markdown header {header}"
    assert table["rows"] == rows >= 2, f"{key}: {table['rows']} rendered rows, the Markdown has {rows}"
    assert table["width"] > 0, f"the {key} table is not laid out"
    return dialog


@requires_instance
def test_figures_page_shows_the_latest_figures_as_images(ui, screenshot_dir):
    browser, base_url, log_path = ui
    _, metadata = _latest_metadata(base_url, "figures")
    assert set(FIGURE_KEYS) <= set(metadata), f"figures metadata {sorted(metadata)} lacks {FIGURE_KEYS}"
    _open_asset_metadata(browser, base_url, "figures", metadata, log_path)
    dialog = previous = None
    for key in FIGURE_KEYS:
        found = re.search(r"!\[[^\]]*\]\((data:image/png;base64,[^)\s]+)\)", metadata[key] or "")
        assert found, f"figures metadata {key} is not Markdown with an embedded PNG"
        if dialog is not None:
            _close(browser, dialog, previous, log_path)
        element, dialog = _rendered_markdown(browser, key, log_path)
        previous = key
        images = _decoded_images(browser, element, found.group(1), key, log_path)
        assert len(images) == 1, f"{key}: {len(images)} images rendered"
        image = images[0]
        assert image["isPng"] and image["same"], f"{key}: the <img> is not the latest materialization's PNG: {image}"
        assert image["naturalWidth"] > 0 and image["naturalHeight"] > 0, f"{key}: the PNG did not decode: {image}"
        assert image["width"] > 0, f"{key}: the image is not laid out: {image}"
    time.sleep(0.5)  # the dialog's opening transition
    _screenshot(browser, screenshot_dir / "figures_metadata.png", min_bytes=50_000)


@requires_instance
def test_paper_tables_page_shows_the_latest_tables(ui, screenshot_dir):
    browser, base_url, log_path = ui
    _, metadata = _latest_metadata(base_url, "paper_tables")
    assert set(TABLE_KEYS) <= set(metadata), f"paper_tables metadata {sorted(metadata)} lacks {TABLE_KEYS}"
    _open_asset_metadata(browser, base_url, "paper_tables", metadata, log_path)
    for key in TABLE_KEYS:
        dialog = _assert_rendered_table(browser, key, metadata[key], log_path)
        if dialog is not None and key != TABLE_KEYS[-1]:
            time.sleep(0.5)
            _screenshot(browser, screenshot_dir / f"paper_tables_{key}.png")
            _close(browser, dialog, key, log_path)
    time.sleep(0.5)
    _screenshot(browser, screenshot_dir / "paper_tables_metadata.png")


@requires_instance
def test_backtests_page_shows_the_latest_partitions_metrics(ui, screenshot_dir):
    browser, base_url, log_path = ui
    latest, metadata = _latest_metadata(base_url, "splinegpt_backtests")
    keys = [label for label in metadata if METRICS_KEY.fullmatch(label)]
    assert keys, f"splinegpt_backtests metadata {sorted(metadata)} has no metrics_at_<cost>_bps table"
    _open_asset_metadata(browser, base_url, "splinegpt_backtests", metadata, log_path)
    assert latest["partition"] and latest["partition"] in _page_lines(browser), "the latest partition's key"
    _assert_rendered_table(browser, keys[0], metadata[keys[0]], log_path)
    time.sleep(0.5)
    _screenshot(browser, screenshot_dir / "backtests_metadata.png")
