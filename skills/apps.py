from django.apps import AppConfig


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skills"

    def ready(self):
        # Agents name skills; the agents app resolves those references through this.
        from core import references
        from skills.selectors import skill_versions_resolve

        references.resolver_install("skill_versions", skill_versions_resolve)
