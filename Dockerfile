# One image for both components: `gpu-exporter` (DaemonSet) and `gpu-automator run` (Deployment).
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY steward_common ./steward_common
COPY exporter ./exporter
COPY automator ./automator
COPY dashboards ./dashboards
# Runtime dependencies resolved from pyproject, pinned to the versions the tests ran with.
RUN pip install --no-cache-dir -c requirements.lock . && rm -rf /src
WORKDIR /
EXPOSE 31995 8080
ENTRYPOINT ["gpu-exporter"]
