"""Input serializers (DRF, STYLE.md §18) and wire shapes, one module per resource. Limits on
every field are in `common`."""
