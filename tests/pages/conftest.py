from tests.support.browser import browser, server  # noqa: F401 (fixtures)
