# PostgreSQL 15 from Debian's packages for the compose stack (make compose-images): the shared
# debootstrap root, then apt-get. Like the registry's postgres image, it initialises
# $PGDATA on first start from POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB and serves on 5432
# (password auth from the network) as the postgres user.
ARG DEBIAN_IMAGE=mango-debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/mango.conf \
    && apt-get update -qq && apt-get install -y -qq postgresql-15 && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
USER postgres
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
CMD ["postgres"]
