# The app image's base (make base-image): python3.11 and its venv module from Debian's packages,
# on the shared debootstrap root (scripts/lib.sh ensure_debian_image).
ARG DEBIAN_IMAGE=mango-debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update -qq && apt-get install -y -qq python3 python3-venv && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
