import pytest

from tests.support.browser import browser, chromium, server  # noqa: F401 (fixtures)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A page test that failed shows what its server was asked and how long each took,
    and the stacks of the requests still in hand."""
    outcome = yield
    report = outcome.get_result()
    log = getattr(item, "served_requests", None)
    if report.when == "call" and report.failed and log is not None:
        report.sections.append(("requests to the test server", log.report()))
