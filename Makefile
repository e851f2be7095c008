# ablate: `make sweep` then `make rank`. Without a GPU, `make static` then `make rank`.
# KERNEL=rmsnorm picks another kernel plugin (kernels/<name>/; default: conf/config.yaml's),
# SHAPE=... another of its shapes (default: the kernel's own), ARGS=... any Hydra overrides.
PYTHON ?= $(shell command -v python >/dev/null 2>&1 && echo python || echo python3)
KERNEL ?=
SHAPE ?=
SWEEP ?=
ARGS ?=
TEST_JOBS ?= 2
STORE ?= $(or $(MLFLOW_TRACKING_URI),sqlite:///runs/mlflow.db)
CHOICES = $(if $(KERNEL),kernel=$(KERNEL)) $(if $(SHAPE),shape=$(SHAPE))

.PHONY: install test sweep profile static tune rank compare calibrate interactions insitu ui server new-kernel docs clean purge

install:  ## torch (the CUDA build where there is a GPU, else the CPU one), then ablate itself and its dependencies (the docs' MkDocs too)
	$(PYTHON) tools/install_torch.py
	$(PYTHON) -m pip install -e '.[dev,liger,fla,cute,insitu,docs]'

test:  ## the test suite in TEST_JOBS processes (default 2); GPU tests skip without CUDA
	$(PYTHON) -m pytest -q -n $(TEST_JOBS)

sweep:  ## every pathology of the kernel against its base, timed on every GPU of the host (static without a GPU); GPUS=0,1: those alone (GPUS=all: every one, as without it)
	$(if $(filter-out all,$(GPUS)),CUDA_VISIBLE_DEVICES=$(GPUS)) $(PYTHON) -m ablate -m $(CHOICES) 'pathology=glob(*,exclude=tune_*)' $(ARGS)

profile:  ## every pathology timed, then its counters read by Nsight Compute (ncu): make rank shows each mechanism confirmed or refuted, and the rooflines
	$(PYTHON) -m ablate -m $(CHOICES) 'pathology=glob(*,exclude=tune_*)' bench.profile=true $(ARGS)

static:  ## every pathology, binaries only: no GPU needed
	$(PYTHON) -m ablate -m $(CHOICES) 'pathology=glob(*,exclude=tune_*)' mode=static $(ARGS)

tune:  ## each tunable's neighbours (tune_*: generated, no yaml) against the base, then ranked: is the base at a local optimum?
	$(PYTHON) -m ablate -m $(CHOICES) 'pathology=glob(tune_*)' $(ARGS)
	$(PYTHON) -m ablate.report.rank $(if $(KERNEL),--kernel '$(KERNEL)')

rank:  ## the latest sweep ranked (SWEEP=<id> for another, KERNEL=<name> for a kernel's latest)
	$(PYTHON) -m ablate.report.rank $(if $(SWEEP),--sweep '$(SWEEP)') $(if $(KERNEL),--kernel '$(KERNEL)')

compare:  ## two sweeps side by side, the results that disagree beyond their intervals flagged: make compare A=<id> B=<id>
	@if [ -z "$(A)" ] || [ -z "$(B)" ]; then echo "make compare A=<sweep id> B=<sweep id>: both are needed"; exit 1; fi
	$(PYTHON) -m ablate.report.rank --compare '$(A)' '$(B)'

calibrate:  ## the calibrations (conf/calibration/: effects known by construction) timed, then whether each interval covers its truth
	$(PYTHON) -m ablate -m $(CHOICES) 'calibration=glob(*)' $(ARGS)
	$(PYTHON) -m ablate.report.rank $(if $(KERNEL),--kernel '$(KERNEL)')

ui:  ## the MLflow UI on the store
	mlflow ui --backend-store-uri '$(STORE)'

server:  ## an MLflow tracking server over the store, for jobs on other machines: make server [HOST=0.0.0.0] [PORT=5000]
	$(PYTHON) -m ablate.sweep.server --store '$(STORE)' $(if $(HOST),--host '$(HOST)') $(if $(PORT),--port '$(PORT)')

new-kernel:  ## a minimal kernel plugin to start from: make new-kernel NAME=my_kernel [DIR=~/kernels] [KIND=cute]
	@if [ -z "$(NAME)" ]; then echo "make new-kernel NAME=my_kernel [DIR=folder]: NAME is missing"; exit 1; fi
	$(PYTHON) -m ablate.tools.new_kernel '$(NAME)' $(if $(DIR),'$(DIR)') $(if $(KIND),--kind '$(KIND)')

docs:  ## the documentation site: docs/ and mkdocs.yml built into site/ by MkDocs (Material theme), strict: a broken link or a missing page fails
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

# Derived files of this checkout only: its builds (runs/build, where build.dir= put them), figures,
# tables. The MLflow store, Hydra's logs and the build cache every checkout shares stay
# (`ablate cache clear` empties that: ablate/build/cache.py).
clean:
	rm -rf runs/build runs/plots runs/rank.csv runs/rank.md runs/findings.md runs/interactions.csv runs/inversion.csv runs/interactions.md

# Everything under runs/, recorded results included: only when asked by name.
purge:
	@if [ "$(CONFIRM)" != yes ]; then \
	  echo "purge deletes runs/ entirely: the MLflow store (runs/mlflow.db, runs/mlartifacts)," \
	       "every sweep's logs and results, builds and figures. Run: make purge CONFIRM=yes"; exit 1; fi
	rm -rf runs

insitu:  ## every pathology timed in the kernel and inside a model's step, then ranked: make insitu KERNEL=liger_rmsnorm WORKLOAD=ablate.workloads.llama:train [OPTIONS='{layers: 8}'] (static without a GPU)
	@if [ -z "$(WORKLOAD)" ]; then echo "make insitu WORKLOAD=package.module:function: WORKLOAD is missing (shipped: ablate.workloads.llama:train, ablate.workloads.llama:prefill)"; exit 1; fi
	$(PYTHON) -m ablate -m $(CHOICES) 'pathology=glob(*,exclude=tune_*)' insitu.workload=$(WORKLOAD) $(if $(OPTIONS),"insitu.options=$(OPTIONS)") $(ARGS)
	$(PYTHON) -m ablate.report.rank $(if $(KERNEL),--kernel '$(KERNEL)')

interactions:  ## every cross-seam pair of pathologies and the inversion, timed (no peers), then ranked: make interactions SHAPES=s512,s4k
	$(PYTHON) -m ablate -m hydra/sweeper=interactions $(if $(KERNEL),kernel=$(KERNEL)) 'pathology=glob(*,exclude=tune_*)' $(if $(or $(SHAPES),$(SHAPE)),shape=$(or $(SHAPES),$(SHAPE))) 'bench.peers=[]' $(ARGS)
	$(PYTHON) -m ablate.report.rank $(if $(KERNEL),--kernel '$(KERNEL)')
