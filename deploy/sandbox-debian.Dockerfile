# The default session sandbox (make sandbox-image-debian; scripts/sandbox_image.sh): Debian bookworm
# from Debian's packages on the shared debootstrap root (scripts/lib.sh ensure_debian_image), with
# what agents reach for: python3 with pip and venv, git, curl, ca-certificates, nodejs with npm,
# ripgrep, jq, procps and a C toolchain (gcc, g++, make, libc headers); python3-cryptography is
# for the egress proxy, which runs on this image too (sandboxes/egress_proxy.py). The document
# libraries are the built-in skills' (skills/builtin/: xlsx with openpyxl, docx with python-docx,
# pdf with pypdf and reportlab, pptx with python-pptx, which Debian does not package: pip, pinned,
# its dependencies from Debian). The session mount points
# and the fixed sandbox user are laid out as in the busybox image (deploy/sandbox.Dockerfile).
# Environment packages go into images derived from this one (sandboxes/packages.py). The
# compose stack builds it too (its sandbox-image service), on the registry's debian:bookworm.
ARG DEBIAN_IMAGE=mango-debian:bookworm
FROM ${DEBIAN_IMAGE}
ARG SANDBOX_UID=10001
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-pip python3-venv python-is-python3 git curl ca-certificates nodejs npm ripgrep jq \
      procps gcc g++ make libc6-dev less file unzip xz-utils iproute2 python3-cryptography \
      python3-openpyxl python3-docx python3-pypdf python3-reportlab python3-lxml python3-pil python3-xlsxwriter \
      python3-typing-extensions \
 && pip install --no-cache-dir --no-deps --break-system-packages python-pptx==1.0.2 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /usr/share/doc/* /usr/share/man/* \
 && mkdir -p /mnt/session/outputs /mnt/session/uploads /workspace \
 && chmod 1777 /tmp \
 && groupadd -g ${SANDBOX_UID} sandbox && useradd -u ${SANDBOX_UID} -g ${SANDBOX_UID} -d /workspace -M -s /bin/bash sandbox \
 # pip may install into the user's site (no root) and into the system (package installs, as root)
 && printf '[global]\nbreak-system-packages = true\nroot-user-action = ignore\ndisable-pip-version-check = true\n' > /etc/pip.conf \
 && git config --system init.defaultBranch main \
 && git config --system --add safe.directory '*'
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PIP_NO_CACHE_DIR=1 \
    npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
LABEL mango.sandbox.managers="apt pip npm"
WORKDIR /workspace
CMD ["/bin/bash"]
