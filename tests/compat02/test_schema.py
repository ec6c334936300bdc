"""compat.md "DatasetSchema": flat keys, the schema document, error phrases, infer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from episodata import DatasetSchema, FieldSpec, SchemaError


def schema() -> DatasetSchema:
    return DatasetSchema(
        [
            FieldSpec("camera", (3, 8, 8), "uint8", "observation", 0, 255, "CHW", False),
            FieldSpec("state", shape=(5,), dtype="float32"),
            FieldSpec("move", shape=(2,), dtype="float32", role="action"),
            FieldSpec("keyboard/jump", shape=(), dtype="bool", role="action"),
            FieldSpec("reward", shape=(), dtype="float32", role="reward"),
            FieldSpec("note", shape=(2,), dtype="float64", role="info", optional=True),
        ]
    )


def test_fieldspec_positional_arguments_and_frozen():
    spec = schema().field("camera")
    assert (spec.key, spec.shape, spec.dtype, spec.role) == (
        "camera",
        (3, 8, 8),
        "uint8",
        "observation",
    )
    assert (spec.low, spec.high, spec.layout, spec.optional) == (0, 255, "CHW", False)
    with pytest.raises(Exception, match="frozen"):
        spec.key = "other"  # type: ignore[misc]


def test_field_by_flat_key_and_by_role():
    s = schema()
    assert s.field("keyboard/jump").role == "action"
    assert s.field("action", "move").key == "move"


def test_field_key_in_two_roles_names_both():
    s = DatasetSchema(
        [
            FieldSpec("a", shape=(), dtype="float32"),
            FieldSpec("a", shape=(), dtype="float32", role="action"),
        ]
    )
    with pytest.raises(KeyError, match="'observation' and 'action'"):
        s.field("a")


def test_field_keys():
    s = schema()
    assert s.field_keys() == ["camera", "state", "move", "keyboard/jump", "reward", "note"]
    assert s.field_keys("action") == ["move", "keyboard/jump"]


def test_resolve_fields_in_request_order_with_groups():
    s = schema()
    assert s.resolve_fields(["reward", "keyboard", "camera"]) == [
        "reward",
        "keyboard/jump",
        "camera",
    ]
    with pytest.raises(KeyError, match="unknown field"):
        s.resolve_fields(["sonar"])


def test_validate_fields():
    s = schema()
    values = {
        k: np.zeros((4, *s.field(k).shape), s.field(k).dtype) for k in s.field_keys() if k != "note"
    }
    checked = s.validate_fields(values)
    assert set(checked) == set(values)
    with pytest.raises(KeyError, match="not in the schema"):
        s.validate_fields({**values, "sonar": np.zeros(4)})
    with pytest.raises(ValueError, match="missing required fields"):
        s.validate_fields({"camera": values["camera"]})
    with pytest.raises(ValueError, match="time axis"):
        s.validate_fields({**values, "state": np.zeros(5, np.float32)})
    # validation is not loosened: 300 does not fit uint8
    with pytest.raises(SchemaError, match="outside the range"):
        s.validate_fields({**values, "camera": np.full((4, 3, 8, 8), 300)})


def test_to_dict_from_dict_schema_version_2():
    s = schema()
    document = s.to_dict()
    assert document["schema_version"] == 2
    assert document["fields"][0] == {
        "key": "camera", "shape": [3, 8, 8], "dtype": "uint8", "role": "observation",
        "low": 0, "high": 255, "layout": "CHW", "optional": False,
    }  # fmt: skip
    assert DatasetSchema.from_dict(document) == s
    with pytest.raises(ValueError, match="unsupported schema version"):
        DatasetSchema.from_dict({**document, "schema_version": 3})


def test_to_json_from_json():
    s = schema()
    assert json.loads(s.to_json())["schema_version"] == 2
    assert DatasetSchema.from_json(s.to_json()) == s


def test_fields_mapping_by_flat_key():
    s = schema()
    assert "camera" in s.fields
    assert s.fields["state"].shape == (5,)
    assert s.fields.keys() == s.field_keys()
    assert [spec.key for spec in s.fields.values()] == s.field_keys()
    assert dict(s.fields.items())["move"].role == "action"
    assert all(isinstance(spec, FieldSpec) for spec in s.fields)


def test_error_phrases():
    with pytest.raises(ValueError, match="duplicate field key"):
        DatasetSchema([FieldSpec("s", shape=(), dtype="float32")] * 2)
    with pytest.raises(ValueError, match="unknown role"):
        FieldSpec("s", shape=(), dtype="float32", role="sensor")


def test_infer_uint8_bounds_and_optional_infos():
    episode = {
        "initial_observation": {"mask": np.zeros((4, 4), np.uint8), "s": np.zeros(2, np.float32)},
        "observations": {"mask": np.zeros((3, 4, 4), np.uint8), "s": np.zeros((3, 2), np.float32)},
        "actions": np.zeros(3, np.int64),
        "initial_info": {"level": np.int32(0)},
        "infos": {"level": np.zeros(3, np.int32)},
    }
    inferred = DatasetSchema.infer(episode)
    mask = inferred.field("mask")
    assert (mask.low, mask.high) == (0, 255)
    assert inferred.field("level").optional
    assert not inferred.field("s").optional
