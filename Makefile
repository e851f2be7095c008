# ablate: `make sweep` then `make rank`. Without a GPU, `make static` then `make rank`.
PYTHON ?= python
SWEEP ?=
ARGS ?=
STORE ?= $(or $(MLFLOW_TRACKING_URI),sqlite:///runs/mlflow.db)

.PHONY: install test sweep static rank ui clean purge

install:  ## the Python dependencies (torch: see README)
	$(PYTHON) -m pip install -r requirements.txt

test:  ## the test suite; GPU tests skip without CUDA
	$(PYTHON) -m pytest -q

sweep:  ## every pathology against the base on s512, timed (static without a GPU)
	$(PYTHON) -m ablate -m 'pathology=glob(*)' shape=s512 $(ARGS)

static:  ## every pathology, binaries only: no GPU needed
	$(PYTHON) -m ablate -m 'pathology=glob(*)' shape=s512 mode=static $(ARGS)

rank:  ## the latest sweep ranked (SWEEP=<id> for another)
	$(PYTHON) -m ablate.rank $(if $(SWEEP),--sweep '$(SWEEP)')

ui:  ## the MLflow UI on the store
	mlflow ui --backend-store-uri '$(STORE)'

# Derived files only: builds, figures, tables. The MLflow store and Hydra's logs stay.
clean:
	rm -rf runs/build runs/plots runs/rank.csv runs/rank.md

# Everything under runs/, recorded results included: only when asked by name.
purge:
	@if [ "$(CONFIRM)" != yes ]; then \
	  echo "purge deletes runs/ entirely: the MLflow store (runs/mlflow.db, runs/mlartifacts)," \
	       "every sweep's logs and results, builds and figures. Run: make purge CONFIRM=yes"; exit 1; fi
	rm -rf runs
