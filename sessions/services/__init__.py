"""Writes for agents, environments, sessions and events. Each service owns its transaction;
nothing slow (Docker, the model upstream, S3) runs inside one."""
