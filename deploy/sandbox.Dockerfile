# The session sandbox image: the one recipe (scripts/sandbox_busybox_image.sh builds it where no registry is
# reachable, from Debian's static busybox; the compose stack's `sandbox-image` service builds it
# on the engine the worker drives). A static busybox, /bin/sh and the session mount points.
# BUSYBOX_IMAGE: any image with a static /bin/busybox (make compose-images builds mango-busybox:static).
ARG BUSYBOX_IMAGE=busybox:1.36.1-musl
FROM ${BUSYBOX_IMAGE} AS busybox

FROM scratch
COPY --from=busybox /bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /tmp /etc /root /mnt/session/outputs /mnt/session/uploads /workspace \
 && chmod 1777 /tmp \
 && echo "root:x:0:0:root:/root:/bin/sh" > /etc/passwd \
 && echo "root:x:0:" > /etc/group
ENV PATH=/bin
WORKDIR /workspace
CMD ["/bin/sh"]
