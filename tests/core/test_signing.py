"""What Mango signs with SECRET_KEY (page cursors, work tokens) is signed by django.core.signing:
a key rotation (the new key first, the old one in SECRET_KEY_FALLBACKS) keeps what was handed out
valid until the old key is dropped; a cursor of one listing is refused by another."""

import pytest
from django.test import override_settings

from core.errors import InvalidRequest
from core.pagination import cursor_decode, cursor_encode, is_id
from sessions.queue.credentials import work_token, work_token_valid

FIELDS = {"id": is_id}


def test_a_cursor_survives_a_key_rotation_until_the_old_key_goes():
    with override_settings(SECRET_KEY="old-key-" * 8):
        cursor = cursor_encode({"id": "agent_1"}, purpose="agents")
    with override_settings(SECRET_KEY="new-key-" * 8, SECRET_KEY_FALLBACKS=["old-key-" * 8]):
        assert cursor_decode(cursor, purpose="agents", fields=FIELDS) == {"id": "agent_1"}
        with pytest.raises(InvalidRequest):
            cursor_decode(cursor, purpose="sessions", fields=FIELDS)
    with override_settings(SECRET_KEY="new-key-" * 8, SECRET_KEY_FALLBACKS=[]), pytest.raises(InvalidRequest):
        cursor_decode(cursor, purpose="agents", fields=FIELDS)


def test_an_edited_cursor_is_refused():
    cursor = cursor_encode({"id": "agent_1"}, purpose="agents")
    payload, _, signature = cursor.partition(".")
    for edited in (payload[:-1] + "A." + signature, payload + "." + signature[:-1] + "A", payload):
        with pytest.raises(InvalidRequest):
            cursor_decode(edited, purpose="agents", fields=FIELDS)


def test_a_work_token_survives_a_key_rotation_until_the_old_key_goes():
    with override_settings(SECRET_KEY="old-key-" * 8):
        token = work_token(work_id="work_1", session_id="sesn_1", claim=1)
    with override_settings(SECRET_KEY="new-key-" * 8, SECRET_KEY_FALLBACKS=["old-key-" * 8]):
        assert work_token_valid(token, work_id="work_1", session_id="sesn_1", claim=1)
        assert not work_token_valid(token, work_id="work_1", session_id="sesn_2", claim=1)
        assert not work_token_valid(token, work_id="work_2", session_id="sesn_1", claim=1)
        assert not work_token_valid(token, work_id="work_1", session_id="sesn_1", claim=2)
    with override_settings(SECRET_KEY="new-key-" * 8, SECRET_KEY_FALLBACKS=[]):
        assert not work_token_valid(token, work_id="work_1", session_id="sesn_1", claim=1)
