"""Reading a GET /metrics scrape as a test compares it."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def parsed(text: str) -> dict[tuple, float]:
    """Every sample of a scrape, by (name, sorted labels)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(found: dict, name: str) -> float:
    """A sample's values added up over its labels."""
    return sum(value for (sample, _), value in found.items() if sample == name)
