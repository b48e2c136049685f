"""The generated OpenAPI document: valid OpenAPI 3.1, its schemas the models' own, and the
answers every operation shares. (Against a live hub: ``tests/hub/test_openapi.py`` fuzzes
every operation and checks the routes; ``tests/hub/test_openapi_answers.py`` checks real
answers.)"""

from __future__ import annotations

from typing import Any

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from pydantic import TypeAdapter

from hub.core import api_bodies, api_routes, openapi

DOCUMENT = openapi.spec("http://127.0.0.1:8080/")
JSON = "application/json"


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    return openapi.operations(DOCUMENT)


def test_the_document_is_valid_openapi_3_1() -> None:
    validate(DOCUMENT, cls=OpenAPIV31SpecValidator)
    assert DOCUMENT["openapi"] == "3.1.0"
    assert DOCUMENT["servers"] == [{"url": "http://127.0.0.1:8080/"}]


def test_a_broken_document_is_refused_by_the_validator() -> None:
    """The validator is not a formality: a dangling reference fails it."""
    broken = openapi.spec()
    del broken["components"]["schemas"]["ErrorBody"]
    with pytest.raises(Exception, match="ErrorBody"):
        validate(broken, cls=OpenAPIV31SpecValidator)


@pytest.mark.parametrize(
    ("model", "mode"),
    [(m, "serialization") for m in api_bodies.RESPONSE_MODELS]
    + [(m, "validation") for m in api_bodies.REQUEST_MODELS],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_each_schema_is_its_model_s_own(model: type[Any], mode: Any) -> None:
    own = TypeAdapter(model).json_schema(mode=mode, ref_template="#/components/schemas/{model}")
    nested = own.pop("$defs", {})
    schemas = DOCUMENT["components"]["schemas"]
    assert schemas[model.__name__] == own
    for name, schema in nested.items():
        assert schemas[name] == schema, name


def test_json_bodies_are_never_described_by_hand() -> None:
    """Every JSON body an operation answers or takes is a model's schema (by reference),
    but the document's own."""
    for method, path, op in _operations():
        bodies = [a.get("content", {}) for a in op["responses"].values()]
        bodies.append(op.get("requestBody", {}).get("content", {}))
        for content in bodies:
            for media in (JSON, api_routes.FORM):
                schema = content.get(media, {}).get("schema")
                if schema is None or (path, media) in {
                    ("/openapi.json", JSON),
                    ("/", api_routes.FORM),  # WebSub's form, described in the route data
                }:
                    continue
                assert set(schema) == {"$ref"}, (method, path, media, schema)


def test_every_model_is_some_operation_s_body() -> None:
    used = {
        ref.rsplit("/", 1)[1]
        for _m, _p, op in _operations()
        for container in (*op["responses"].values(), op.get("requestBody", {}))
        for content in container.get("content", {}).values()
        if (ref := content["schema"].get("$ref"))
    }
    listed = {m.__name__ for m in (*api_bodies.RESPONSE_MODELS, *api_bodies.REQUEST_MODELS)}
    assert listed == used


def test_every_operation_documents_the_shared_refusals() -> None:
    """The header rule runs before every handler: 417 for an Expect the hub does not know,
    400 for a header it cannot read; whatever reads Redis may also meet damaged data."""
    assert len(_operations()) == len(api_routes.ROUTES)
    for method, path, op in _operations():
        answers = op["responses"]
        for status in ("400", "417"):
            schema = answers[status]["content"][JSON]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)
        assert "Expect" in answers["417"]["description"]
        assert "printable ASCII" in answers["400"]["description"], (method, path)
        if "503" in answers:
            assert "damaged" in answers["500"]["description"], (method, path)
        assert list(answers) == sorted(answers), (method, path)


def test_each_operation_id_is_unique() -> None:
    ids = [op["operationId"] for _m, _p, op in _operations()]
    assert len(ids) == len(set(ids))
