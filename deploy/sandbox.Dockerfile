# The session sandbox image for the compose stack (built by its `sandbox-image` service on the
# engine the worker drives). Same contents as sandbox/build.sh makes without a registry: a
# static busybox, /bin/sh, and the session mount points. BUSYBOX_IMAGE names a local busybox
# image when no registry is reachable (make compose-images builds mango-busybox:static).
ARG BUSYBOX_IMAGE=busybox:1.36.1-musl
FROM ${BUSYBOX_IMAGE}
RUN mkdir -p /mnt/session/outputs /mnt/session/uploads /workspace && chmod 1777 /tmp
ENV PATH=/bin
WORKDIR /workspace
CMD ["/bin/sh"]
