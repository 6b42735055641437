"""A test client used as a browser in the workspace: signed in through the sign-in form
(with a password or a token), and the CSRF token its pages carry."""

from __future__ import annotations

import re

_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def page_csrf(client, path: str = "/login") -> str:
    """The CSRF token the page at `path` carries in its forms."""
    return _CSRF.search(client.get(path).text).group(1)


def sign_in_form(client, *, email: str = "", password: str = "", token: str = ""):
    """Send the sign-in form as a browser does (its CSRF token from the form); the answer."""
    return client.post(
        "/login",
        data={
            "email": email,
            "password": password,
            "token": token,
            "csrf_token": page_csrf(client),
        },
        follow_redirects=False,
    )


def signed_in_browser(client, *, email: str = "", password: str = "", token: str = ""):
    """The client's cookie jar signed in to the workspace, by password or token."""
    signed_in = sign_in_form(client, email=email, password=password, token=token)
    assert signed_in.status_code == 303, signed_in.text
    return client


def signed_in_page_csrf(client, bearer: dict, path: str) -> str:
    """Sign the client in to the workspace with the API token in `bearer` (as the
    sign-in form allows) and return the CSRF token of the page at `path`."""
    signed_in_browser(client, token=bearer["Authorization"].removeprefix("Bearer "))
    return page_csrf(client, path)
