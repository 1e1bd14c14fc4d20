# The session sandbox image for the compose stack (built by its `sandbox-image` service on the
# engine the worker drives). Same contents as sandbox/build.sh makes without a registry: a
# static busybox, /bin/sh, and the session mount points.
FROM busybox:1.36.1-musl
RUN mkdir -p /mnt/session/outputs /mnt/session/uploads /workspace && chmod 1777 /tmp
ENV PATH=/bin
WORKDIR /workspace
CMD ["/bin/sh"]
