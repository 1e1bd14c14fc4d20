"""Page ranges as the scripts take them: "1-3,5" (1-based, inclusive) to 0-based indexes."""


def page_indexes(spec: str | None, count: int) -> list[int]:
    if not spec:
        return list(range(count))
    wanted = []
    for part in spec.split(","):
        first, _, last = part.strip().partition("-")
        start, end = int(first), int(last or first)
        wanted.extend(index - 1 for index in range(start, end + 1) if 1 <= index <= count)
    return wanted
