"""Agents, environments, sessions, session events and resources over HTTP: one module per
resource. Views parse (input serializers), call a service or selector, and render (STYLE.md 3);
errors are raised, never built here."""
