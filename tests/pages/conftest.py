from tests.support.browser import browser, chromium, server  # noqa: F401 (fixtures)
