"""Resource mount paths follow the one file-name rule (processors/filenames.py): control,
line-separator and bidirectional-override characters are refused with a 400, and nothing —
no session, no copied File, no object — is left behind."""

import anthropic
import pytest

from files.models import File, StorageIntent
from sessions.models import Session

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u2028", "\x85", "\r"], ids=lambda c: f"U+{ord(c):04X}")
def test_mount_path_with_unsafe_characters_is_400_and_leaves_nothing(sdk, s3_bucket, char):
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    source = sdk.beta.files.upload(file=("data.csv", b"a,b\n", "text/csv"))
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.create(
            agent=agent.id,
            environment_id=environment.id,
            resources=[{"type": "file", "file_id": source.id, "mount_path": f"/data/evil{char}txt.exe"}],
        )
    message = raised.value.body["error"]["message"]
    assert "mount_path" in message and f"U+{ord(char):04X}" in message and char not in message
    assert Session.objects.count() == 0
    assert list(File.objects.values_list("id", flat=True)) == [source.id]
    assert not StorageIntent.objects.filter(state="open").exists()
