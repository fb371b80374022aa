"""The web console (`api/console`) in a real headless Chromium (Debian's `chromium`, driven by
Playwright for Python through `executable_path`: nothing is downloaded) against a real
`videogen serve` with the tiny Wan model and the built-in block-causal model for live streams.

Every state is saved as a screenshot under the test's temp dir (`console-shots/`), and copied to
`$VIDEOGEN_CONSOLE_SHOTS` when that is set, to be looked at."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
from service_helpers import stream_presets, wait_for

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed (the [dev] extra)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install -y chromium)")

KEY = "key-alpha"
INVALID = re.compile(r"\binvalid\b")
WAIT_MS = 60_000  # generous: a loaded 2-core machine


def wait_js(page, expression: str, timeout: float = WAIT_MS / 1000):
    """Poll a JavaScript expression until it is truthy. (Playwright's `wait_for_function` compiles
    its predicate with eval, which the console's Content-Security-Policy forbids, as it should.)"""
    deadline = time.monotonic() + timeout
    while not (value := page.evaluate(expression)):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        page.wait_for_timeout(100)
    return value


@pytest.fixture(scope="module")
def server(tmp_path_factory, make_server, tiny_model):
    d = tmp_path_factory.mktemp("console")
    (d / "config").mkdir()
    (d / "config" / "models.yaml").write_text(stream_presets(tiny_model))  # tiny + a stream model
    s = make_server(d / "data", d / "server.log", extra_env={"VIDEOGEN_CONFIG_DIR": str(d / "config")})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    pw = sync_api.sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """shots(page, name): a full-page screenshot, kept with the test's files (and copied to
    $VIDEOGEN_CONSOLE_SHOTS when set)."""
    folder = tmp_path_factory.mktemp("console-shots")
    extra = os.environ.get("VIDEOGEN_CONSOLE_SHOTS")

    def take(page, name: str) -> Path:
        path = folder / f"{name}.png"
        page.evaluate("window.scrollTo(0, 0)")  # a full-page shot keeps the sticky header at the scroll position
        page.screenshot(path=str(path), full_page=True)
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(extra) / path.name)
        return path

    return take


class Console:
    """A browser tab on the console, recording what would make it look broken: script errors
    and requests that leave the server (the page must work offline)."""

    def __init__(self, browser, url: str, viewport: tuple[int, int] = (1360, 900)) -> None:
        self.url = url
        self.context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", self._console)
        self.page.on("request", self._request)

    def _console(self, message) -> None:
        # An HTTP error the page handles (a wrong key's 401, /readyz's 503 while the worker starts)
        # is logged by Chromium as "Failed to load resource"; anything else is a script's error.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(message.text)

    def _request(self, request) -> None:
        if not request.url.startswith((self.url, self.url.replace("http", "ws", 1), "blob:", "data:")):
            self.foreign.append(request.url)

    def open(self, key: str | None = KEY, signed_in: bool = True) -> Console:
        self.page.goto(self.url + "/")
        if key is not None:
            self.page.fill("#api-key", key)
            self.page.click("#form-signin button[type=submit]")
        if signed_in:
            self.page.wait_for_selector("body[data-ready=true]")
        return self

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console(browser, server):
    tabs: list[Console] = []

    def open_tab(key: str | None = KEY, url: str | None = None, signed_in: bool = True) -> Console:
        tab = Console(browser, url or server.url)
        tabs.append(tab)
        return tab.open(key, signed_in)

    yield open_tab
    for tab in tabs:
        tab.close()
    for tab in tabs:
        assert not tab.errors, f"errors in the page: {tab.errors}"
        assert not tab.foreign, f"the page loaded from elsewhere: {tab.foreign}"


def submit_video(page, prompt: str, seconds: str) -> str:
    """Submit the video form; the id is the one the create answered (the detail may still show the
    job a fresh tab selects first, an earlier test's), and the detail has switched to it."""
    page.fill("#v-prompt", prompt)
    page.fill("#v-seconds", seconds)
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/v1/videos")) as created:
        page.click("#form-video button[type=submit]")
    video_id = created.value.json()["id"]
    wait_js(page, f"document.querySelector('#detail')?.dataset.id === '{video_id}'")
    return video_id


def test_sign_in_shows_a_wrong_key_next_to_the_field_and_keeps_the_right_one_for_the_tab(console, shots):
    tab = console(key="not-a-key", signed_in=False)
    page = tab.page
    page.wait_for_selector("#signin .field.invalid")
    error = page.inner_text("#signin .field[data-param=api_key] .field-error")
    assert "Incorrect API key" in error
    shots(page, "01-sign-in-error")
    page.fill("#api-key", KEY)
    page.click("#form-signin button[type=submit]")
    page.wait_for_selector("#app:not([hidden])")
    assert page.inner_text("#tenant") == "alpha"
    page.reload()  # the key is kept in session storage: no second sign-in
    page.wait_for_selector("body[data-ready=true]")
    assert page.is_hidden("#signin")
    models = page.eval_on_selector_all("#v-model option", "os => os.map(o => o.value)")
    assert models == ["builtin-causal", "tiny"] and page.input_value("#v-model") == "tiny"
    assert page.eval_on_selector_all("#s-model option", "os => os.map(o => o.value)") == ["builtin-causal"]


def test_a_bad_field_shows_the_api_error_next_to_that_field(console, server, shots, tmp_path):
    page = console().page
    page.fill("#v-prompt", "a red circle")
    # A start image that is not one: the multipart create's 400 names input_reference.
    (tmp_path / "notes.png").write_bytes(b"not an image at all")
    page.set_input_files("#v-image", str(tmp_path / "notes.png"))
    sync_api.expect(page.locator("#dropzone .dz-name")).to_contain_text("notes.png")
    page.click("#form-video button[type=submit]")
    image = page.locator("#form-video .field[data-param=input_reference]")
    sync_api.expect(image).to_have_class(INVALID)
    assert "must be a PNG, JPEG or WebP image" in image.locator(".field-error").inner_text()
    page.click("#v-image-clear")
    sync_api.expect(page.locator("#dropzone .dz-empty")).to_be_visible()
    page.fill("#v-size", "12x")
    page.click("#form-video button[type=submit]")
    size = page.locator("#form-video .field[data-param=size]")
    sync_api.expect(size).to_have_class(INVALID)
    assert "Invalid 'size' ('12x')" in size.locator(".field-error").inner_text()
    assert page.get_attribute("#v-size", "aria-invalid") == "true"
    shots(page, "02-bad-size")
    page.fill("#v-size", "")  # typing clears the error
    sync_api.expect(size).not_to_have_class(INVALID)

    # A multi-shot timeline: the error names shots[1].seconds, shown on that shot's row.
    page.click(".seg-btn[data-mode=shots]")
    sync_api.expect(page.locator("#shots .shot")).to_have_count(2)
    page.click("#add-shot")
    sync_api.expect(page.locator("#shots .shot")).to_have_count(3)
    page.locator("#shots .shot").nth(2).locator("button").click()  # remove the third again
    sync_api.expect(page.locator("#shots .shot")).to_have_count(2)
    page.locator("#shots .shot").nth(1).locator("textarea").fill("a blue square")
    page.locator("#shots .shot").nth(1).locator("input").fill("0")
    page.click("#form-video button[type=submit]")
    second = page.locator("#shots .shot").nth(1).locator(".field[data-param='shots.1.seconds']")
    sync_api.expect(second).to_have_class(INVALID)
    assert "shots[1].seconds" in second.locator(".field-error").inner_text()
    shots(page, "02-bad-shot")
    with server.client(KEY) as c:
        assert c.get("/v1/videos").json()["data"] == []  # nothing was created


def test_a_video_renders_live_to_100_percent_plays_with_its_length_and_extends(console, server, shots):
    page = console().page
    video_id = submit_video(page, "a red circle moving right on a black background", "2")
    tab_log = "#detail .log"
    # SSE, segment by segment: the activity lists each segment as the worker records it.
    page.wait_for_selector(f"{tab_log} >> text=Segment 2 of 2 done")
    assert page.locator(tab_log, has_text="Segment 1 of 2 done").count() == 1
    assert page.locator(tab_log, has_text="Rendering started").count() == 1
    tab_status = "#detail .detail-status .pill[data-status=completed]"
    page.wait_for_selector(tab_status)
    assert page.get_attribute("#detail .progress-block", "data-progress") == "100"
    assert page.inner_text("#detail .progress-block .pct") == "100%"
    assert page.locator("#detail .segments .seg.done").count() == 2
    # The video plays in the page, and is as long as asked (16 frames at 8 fps).
    wait_js(page, "(v => v && v.readyState >= 2 && v.currentTime > 0)(document.querySelector('#detail video.player'))")
    assert page.eval_on_selector("#detail video.player", "v => v.duration") == pytest.approx(2.0, abs=0.13)
    for variant in ("video", "thumbnail", "drift_report", "drift_plot"):
        link = page.locator(f"#detail a.dl[data-variant={variant}]")
        sync_api.expect(link).to_be_visible()
        assert link.get_attribute("href").startswith("blob:")
    with page.expect_download() as download:  # a real download of the blob the page fetched with the key
        page.click("#detail a.dl[data-variant=drift_report]")
    assert download.value.suggested_filename == f"{video_id}.drift.json"
    assert json.loads(Path(download.value.path()).read_text())  # the drift report, as JSON
    wait_js(page, "document.querySelector('#detail .drift-plot img')?.naturalWidth > 0")
    page.wait_for_selector(f"#job-list .job-row[data-id={video_id}] .thumb img")
    shots(page, "03-completed")

    # Extend it: the extension tab opens with this video chosen.
    page.click("#detail .detail-actions >> text=Extend")
    assert page.input_value("#e-video") == video_id
    page.fill("#e-prompt", "the red circle keeps moving right")
    page.fill("#e-seconds", "2")
    page.click("#form-extend button[type=submit]")
    wait_js(page, f"(id => id && id !== '{video_id}')(document.querySelector('#detail').dataset.id)")
    page.wait_for_selector(tab_status)
    wait_js(page, "document.querySelector('#detail video.player')?.readyState >= 1")
    assert page.eval_on_selector("#detail video.player", "v => v.duration") == pytest.approx(4.0, abs=0.13)
    shots(page, "04-extended")

    page.click("#theme")  # dark
    page.wait_for_selector("html[data-theme=dark]")
    shots(page, "05-completed-dark")
    page.set_viewport_size({"width": 390, "height": 844})
    shots(page, "06-narrow")


def test_cancel_a_running_job_from_the_page(console, server, shots, tmp_path):
    from PIL import Image

    page = console().page
    Image.new("RGB", (48, 48), (30, 60, 200)).save(tmp_path / "start.png")  # a start image: a multipart create
    page.set_input_files("#v-image", str(tmp_path / "start.png"))
    video_id = submit_video(page, "a blue square bouncing", "40")  # about 40 segments: long enough to catch
    # Progress moves live: a segment done, not yet 100.
    wait_js(page, "(b => b && b.dataset.status === 'in_progress' && +b.dataset.progress > 0 && "
                  "b.querySelectorAll('.seg.done').length >= 1)(document.querySelector('#detail .progress-block'))")  # fmt: skip
    assert 0 < int(page.get_attribute("#detail .progress-block", "data-progress")) < 100
    shots(page, "07-rendering")
    page.click("#cancel")
    page.wait_for_selector("#detail .detail-status .pill[data-status=cancelled]")
    assert "Stopped after" in page.inner_text("#detail .cancel-note")
    with server.client(KEY) as c:
        assert c.get(f"/v1/videos/{video_id}").json()["status"] == "cancelled"
    shots(page, "08-cancelled")
    # Delete asks for a second click, then the job is gone from the list and the API.
    page.click("#detail .btn-delete")
    sync_api.expect(page.locator("#detail .btn-delete")).to_have_text("Click again to delete")
    page.click("#detail .btn-delete")
    page.wait_for_selector(f"#job-list .job-row[data-id={video_id}]", state="detached")
    with server.client(KEY) as c:
        assert c.get(f"/v1/videos/{video_id}").status_code == 404


def test_a_live_stream_shows_frames_switches_its_prompt_and_stops(console, server, shots):
    page = console().page
    page.click(".tab[data-tab=stream]")
    page.fill("#s-prompt", "a red circle moving right")
    page.fill("#s-seconds", "60")
    page.click("#form-stream button[type=submit]")
    wait_js(page, "+document.querySelector('#detail .live-stage')?.dataset.frames >= 4")
    # The frames drawn are pictures, not an empty canvas.
    brightest = page.eval_on_selector(
        "#detail canvas.live-canvas",
        "c => Math.max(...c.getContext('2d').getImageData(0, 0, c.width, c.height).data.filter((_, i) => i % 4 !== 3))",
    )
    assert brightest > 40
    shots(page, "09-live")
    page.fill("#live-prompt", "a blue square moving up")
    page.click("#detail .live-controls button[type=submit]")
    sync_api.expect(page.locator("#detail .now-prompt")).to_have_text("a blue square moving up", timeout=WAIT_MS)
    page.wait_for_selector("#detail .log >> text=Prompt switched")
    shots(page, "10-live-switched")
    page.click("#cancel")
    page.wait_for_selector("#detail .detail-status .pill[data-status=cancelled]")
    video_id = page.eval_on_selector("#detail", "el => el.dataset.id")
    with server.client(KEY) as c:
        video = wait_for(c, video_id, lambda v: v["status"] == "cancelled", timeout=30)
    assert video["stream"]["prompt_switches"][0]["prompt"] == "a blue square moving up"


def test_the_api_docs_work_offline(browser, server, shots):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    foreign = []

    def only_local(route):
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    try:
        page.goto(server.url + "/docs")
        page.wait_for_selector(".swagger-ui .info .title >> text=videogen", timeout=WAIT_MS)
        page.wait_for_selector(".swagger-ui .opblock")
        assert page.locator(".swagger-ui .opblock").count() >= 10  # every route, from /openapi.json
        shots(page, "11-docs")
    finally:
        context.close()
    assert not foreign, foreign
    r = httpx.get(server.url + "/redoc")
    assert r.status_code == 200 and "/docs-assets/redoc.standalone.js" in r.text


def test_a_no_auth_server_opens_the_console_without_a_key(console, serve, shots):
    local = serve(args=["--no-auth"])
    tab = console(key=None, url=local.url)
    assert tab.page.is_hidden("#signin") and tab.page.is_hidden("#sign-out")
    assert tab.page.inner_text("#tenant") == "local"
    shots(tab.page, "12-no-auth-empty")
    urls = [line for line in local.output().splitlines() if "http://" in line]
    assert urls[0].startswith(f"videogen console: {local.url}/ ")  # the first URL `videogen serve` prints
