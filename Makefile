# mixshard's front door. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DATA ?= data
WORKERS ?=

.DEFAULT_GOAL := help
.PHONY: help venv test test-cuda coverage lint format demo bench places365 coco dmcgb-videos dmcgb2-videos dbc-videos davis clean

help:
	@echo "make demo    generate a procedural image folder, pack it, show the result"
	@echo "make test    create .venv if missing, install mixshard with dev extras, run pytest"
	@echo "make coverage  the tests with line coverage of mixshard/ (worker processes included)"
	@echo "make lint    ruff check + format check + mypy"
	@echo "make bench   run the benchmarks (scripts/bench_*.py)"
	@echo "make places365 [SRC=<folder or .tar>] DATA=<dir>   pack Places365-Standard (no SRC: download)"
	@echo "  ... SIZE=96   a pack for 96 px observations, in <dir>/places365_standard-96"
	@echo "make coco [SRC=<folder or .zip>] DATA=<dir>         pack COCO val2017 (no SRC: download)"
	@echo "make dmcgb-videos SRC=<DMC-GB checkout>/src/env/data DATA=<dir>"
	@echo "              pack DMC-GB's video_easy (10) and video_hard (100) clips as clip packs,"
	@echo "              resized as DMC-GB resizes them (SIZE=100 for RAD, CURL, PAD, SODA)"
	@echo "make dmcgb2-videos SRC=<DMC-GB2 checkout>/envs/dmcgb/data DATA=<dir>"
	@echo "              pack DMC-GB2's video_easy and video_hard clips at its 256 px texture,"
	@echo "              resized as its PIL Image.resize (bicubic), for mixshard.dmcgb2"
	@echo "make dbc-videos SRC=<folder of DBC's natural videos> DATA=<dir>"
	@echo "              pack DBC's --resource_files videos (Kinetics) for mixshard.compat.RandomVideoSource"
	@echo "make davis SRC=<DAVIS-2017 trainval folder or .zip> DATA=<dir>"
	@echo "              pack DAVIS 2017 480p as the Distracting Control Suite's train and val clips"
	@echo "  (PACK_ARGS='--size 64 ...': pack options; REPACK=1: replace an existing pack)"

# The venv is (re)installed when pyproject.toml or a compiled module's source changes: the
# runtime alone for the demo and the dataset targets, with the dev extras (pytest, Ray, moto,
# gcsfs, ...) for the tests and lint.
RUNTIME := $(VENV)/.runtime-stamp
$(RUNTIME): pyproject.toml mixshard/writing/pixels/_resize.c mixshard/reading/pack/_mapped.c mixshard/augment/kernels/_lerp.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e .
	@touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

coverage: $(STAMP)
	$(PY) -m pytest --cov=mixshard --cov-report=term-missing:skip-covered

test-cuda: $(STAMP)
	$(PY) -m pytest -m cuda

lint: $(STAMP)
	$(PY) -m ruff check mixshard tests scripts
	$(PY) -m ruff format --check mixshard tests scripts
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff format mixshard tests scripts
	$(PY) -m ruff check --fix mixshard tests scripts

demo: $(RUNTIME)
	$(PY) scripts/demo.py

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) scripts/bench_pack.py --plot
	$(PY) scripts/bench_stream.py --plot
	$(PY) scripts/bench_overlay.py --plot
	$(PY) scripts/bench_remote.py

# Dataset targets: pack a downloaded dataset where mixshard.compat.random_overlay finds it
# (MIXSHARD_DATA=$(DATA)). Rerunning a target finishes an interrupted pack (--resume); with
# REPACK=1 (or --overwrite in PACK_ARGS) it replaces the pack, which stays whole until the new
# one is complete. scripts/make_check.py refuses a literal ~ and a DATA inside SRC.
# Without SRC the archive is downloaded into $(DATA)/downloads (a cut transfer is resumed;
# checked against PLACES365_MD5 / COCO_MD5 when set) and packed straight from it; SRC may be
# the extracted folder or the archive.
PACK_ARGS ?=
REPACK ?=
PACK_MODE = $(if $(REPACK)$(findstring --overwrite,$(PACK_ARGS)),--overwrite,--resume)
# SIZE=96: a pack for 96x96 observations in $(DATA)/<dataset>-96, beside the 84 px one
# (mixshard.compat picks <dataset>-<size> for size x size observations when it exists).
SIZE ?=
SUFFIX := $(if $(SIZE),-$(SIZE))
SIZE_ARG := $(if $(SIZE),--size $(SIZE))
# `mixshard pack $(1)`, and after a failed or interrupted one (not a usage error, exit 2) the
# target's own way on, under the command's message (which names pack's flags): rerun the
# target (it resumes by itself), or add REPACK=1 to replace the pack. The `trap` keeps the
# recipe's shell alive through a Ctrl-C, which the pack catches, to say so.
TARGET_ARGS = $(if $(SRC), SRC=$(SRC)) DATA=$(DATA)$(if $(SIZE), SIZE=$(SIZE))$(if $(PACK_ARGS), PACK_ARGS="$(PACK_ARGS)")
run_pack = trap : INT; $(PY) -m mixshard pack $(1) || { rc=$$?; [ $$rc = 2 ] || { \
  echo 'to continue: make $@$(TARGET_ARGS)$(if $(REPACK), REPACK=1)'; \
  $(if $(REPACK),,echo 'to replace it: make $@$(TARGET_ARGS) REPACK=1';) } >&2; exit $$rc; }
PLACES365_URL ?= http://data.csail.mit.edu/places/places365/places365standard_easyformat.tar
PLACES365_MD5 ?=
PLACES365_WITHIN ?= places365_standard
COCO_URL ?= http://images.cocodataset.org/zips/val2017.zip
COCO_MD5 ?=
COCO_WITHIN ?= val2017
P365 = $(or $(SRC),$(DATA)/downloads/$(notdir $(PLACES365_URL)))
COCO_SRC = $(or $(SRC),$(DATA)/downloads/$(notdir $(COCO_URL)))
is_archive = $(filter %.tar %.tar.gz %.tgz %.zip,$(1))
# the folder $(2) of source $(1) as pack arguments: inside an archive, --within $(3)/$(2)
pack_in = $(if $(call is_archive,$(1)),"$(1)" --within "$(3)$(if $(2),/$(2))","$(1)$(if $(2),/$(2))")
download = $(if $(SRC),,$(PY) scripts/download.py "$(1)" "$(2)" --md5 "$(3)")

places365: $(RUNTIME)
	@$(PY) scripts/make_check.py $@ "$(SRC)" "$(DATA)" places365_standard$(SUFFIX) places365_standard_val$(SUFFIX)
	@if [ -n "$(SRC)" ] && [ -z "$(call is_archive,$(SRC))" ] && [ ! -d "$(SRC)/train" ]; then \
	  echo "make places365 SRC=<dir> DATA=<dir>: SRC must be the places365_standard folder,"; \
	  echo "holding train/<class>/*.jpg and val/<class>/*.jpg, or its archive (got SRC='$(SRC)')."; \
	  echo "Leave SRC unset to download it, or get it from http://places2.csail.mit.edu/download.html:"; \
	  echo "'Places365-Standard', small images (256x256) in easy directory structure"; \
	  echo "(places365standard_easyformat.tar; no need to extract it)."; \
	  exit 1; fi
	$(call download,$(PLACES365_URL),$(P365),$(PLACES365_MD5))
	$(call run_pack,$(call pack_in,$(P365),train,$(PLACES365_WITHIN)) "$(DATA)/places365_standard$(SUFFIX)" $(PACK_MODE) $(SIZE_ARG) $(PACK_ARGS))
	@if [ -n "$(call is_archive,$(P365))" ] || [ -d "$(P365)/val" ]; then \
	  $(call run_pack,$(call pack_in,$(P365),val,$(PLACES365_WITHIN)) "$(DATA)/places365_standard_val$(SUFFIX)" $(PACK_MODE) $(SIZE_ARG) $(PACK_ARGS)); \
	fi
	@echo "Use it: export MIXSHARD_DATA=$(abspath $(DATA))"

coco: $(RUNTIME)
	@$(PY) scripts/make_check.py $@ "$(SRC)" "$(DATA)" coco$(SUFFIX)
	@if [ -n "$(SRC)" ] && [ -z "$(call is_archive,$(SRC))" ] && [ ! -d "$(SRC)" ]; then \
	  echo "make coco SRC=<dir> DATA=<dir>: SRC must be COCO's val2017 folder of 5,000 JPEGs"; \
	  echo "or val2017.zip (got SRC='$(SRC)'). Leave SRC unset to download"; \
	  echo "http://images.cocodataset.org/zips/val2017.zip (no need to unzip it)."; \
	  exit 1; fi
	$(call download,$(COCO_URL),$(COCO_SRC),$(COCO_MD5))
	$(call run_pack,$(call pack_in,$(COCO_SRC),,$(COCO_WITHIN)) "$(DATA)/coco$(SUFFIX)" --labels none $(PACK_MODE) $(SIZE_ARG) $(PACK_ARGS))
	@echo "Use it: export MIXSHARD_DATA=$(abspath $(DATA))"

# Video distractor backgrounds as clip packs (issue 39), each checked afterwards against the
# benchmark's clip list (mixshard/core/presets.py) by scripts/check_clips.py, which names a
# pack that lacks clips. DMC-GB resizes the whole decoded frame to the observation size
# with F.interpolate (bilinear, no antialias), hence --crop full and --resample
# bilinear-no-antialias, at its observations' size: 84 px (SAC, DrQ, SVEA), SIZE=100 for
# RAD, CURL, PAD and SODA (into <dataset>-100, which compat.VideoWrapper picks for 100 px
# observations). DAVIS: one pack per Distracting Control Suite split; --clip-list picks the
# split's frame folders by name.
DMCGB_CLIP_ARGS = --clips --crop full --resample bilinear-no-antialias $(PACK_MODE) $(SIZE_ARG) $(PACK_ARGS)
DAVIS_WITHIN ?= DAVIS/JPEGImages/480p
DAVIS_FRAMES = $(if $(call is_archive,$(SRC)),"$(SRC)" --within "$(DAVIS_WITHIN)","$(SRC)/JPEGImages/480p")

dmcgb-videos: $(RUNTIME)
	@$(PY) scripts/make_check.py $@ "$(SRC)" "$(DATA)" dmcgb-video_easy$(SUFFIX) dmcgb-video_hard$(SUFFIX)
	@if [ -z "$(SRC)" ] || [ ! -d "$(SRC)/video_easy" ] || [ ! -d "$(SRC)/video_hard" ]; then \
	  echo "make dmcgb-videos SRC=<dir> DATA=<dir>: SRC must be DMC-GB's src/env/data folder,"; \
	  echo "holding video_easy/video0.mp4 ... video9.mp4 and video_hard/video0.mp4 ... video99.mp4"; \
	  echo "(git clone https://github.com/nicklashansen/dmcontrol-generalization-benchmark; got SRC='$(SRC)')."; \
	  exit 1; fi
	$(call run_pack,"$(SRC)/video_easy" "$(DATA)/dmcgb-video_easy$(SUFFIX)" $(DMCGB_CLIP_ARGS))
	$(PY) scripts/check_clips.py "$(DATA)/dmcgb-video_easy$(SUFFIX)" dmcgb-video_easy
	$(call run_pack,"$(SRC)/video_hard" "$(DATA)/dmcgb-video_hard$(SUFFIX)" $(DMCGB_CLIP_ARGS))
	$(PY) scripts/check_clips.py "$(DATA)/dmcgb-video_hard$(SUFFIX)" dmcgb-video_hard
	@echo "Use it: export MIXSHARD_DATA=$(abspath $(DATA))"

# DMC-GB2's video modes (mixshard.dmcgb2): its videos at its texture's size, 256 px
# (video_render_size; SIZE= for another, into <dataset>-SIZE), each whole frame resized as its
# PIL Image.resize resizes (bicubic, antialiased: --resample bicubic, PIL's bytes).
DMCGB2_CLIP_ARGS = --clips --crop full --size $(or $(SIZE),256) --resample bicubic $(PACK_MODE) $(PACK_ARGS)

dmcgb2-videos: $(RUNTIME)
	@$(PY) scripts/make_check.py $@ "$(SRC)" "$(DATA)" dmcgb2-video_easy$(SUFFIX) dmcgb2-video_hard$(SUFFIX)
	@if [ -z "$(SRC)" ] || [ ! -d "$(SRC)/video_easy" ] || [ ! -d "$(SRC)/video_hard" ]; then \
	  echo "make dmcgb2-videos SRC=<dir> DATA=<dir>: SRC must be DMC-GB2's envs/dmcgb/data folder,"; \
	  echo "holding video_easy/video0.mp4 ... video9.mp4 and video_hard/video0.mp4 ... video99.mp4"; \
	  echo "(git clone https://github.com/aalmuzairee/dmcgb2; got SRC='$(SRC)')."; \
	  exit 1; fi
	$(call run_pack,"$(SRC)/video_easy" "$(DATA)/dmcgb2-video_easy$(SUFFIX)" $(DMCGB2_CLIP_ARGS))
	$(PY) scripts/check_clips.py "$(DATA)/dmcgb2-video_easy$(SUFFIX)" dmcgb2-video_easy
	$(call run_pack,"$(SRC)/video_hard" "$(DATA)/dmcgb2-video_hard$(SUFFIX)" $(DMCGB2_CLIP_ARGS))
	$(PY) scripts/check_clips.py "$(DATA)/dmcgb2-video_hard$(SUFFIX)" dmcgb2-video_hard
	@echo "Use it: export MIXSHARD_DATA=$(abspath $(DATA))"

# DBC's natural-video background (dmc2gym's RandomVideoSource): the videos its --resource_files
# glob names, every frame, grey as FFmpeg's -pix_fmt gray makes it, resized as cv2.resize
# resizes (bilinear at half-pixel centres, no antialias) to its observations (84 px; SIZE=).
dbc-videos: $(RUNTIME)
	@$(PY) scripts/make_check.py $@ "$(SRC)" "$(DATA)" dbc-video$(SUFFIX)
	@if [ -z "$(SRC)" ] || [ ! -d "$(SRC)" ]; then \
	  echo "make dbc-videos SRC=<dir> DATA=<dir>: SRC must be the folder of DBC's natural videos,"; \
	  echo "the files its --resource_files glob names (Kinetics clips; got SRC='$(SRC)')."; \
	  exit 1; fi
	$(call run_pack,"$(SRC)" "$(DATA)/dbc-video$(SUFFIX)" --clips --crop full --grey --resample bilinear-no-antialias $(PACK_MODE) $(SIZE_ARG) $(PACK_ARGS))
	@echo "Use it: export MIXSHARD_DATA=$(abspath $(DATA))"

davis: $(RUNTIME)
	@$(PY) scripts/make_check.py $@ "$(SRC)" "$(DATA)" davis17-train$(SUFFIX) davis17-val$(SUFFIX)
	@if [ -z "$(SRC)" ] || { [ -z "$(call is_archive,$(SRC))" ] && [ ! -d "$(SRC)/JPEGImages/480p" ]; }; then \
	  echo "make davis SRC=<dir or .zip> DATA=<dir>: SRC must be DAVIS 2017's trainval folder, holding"; \
	  echo "JPEGImages/480p/<clip>/00000.jpg ..., or DAVIS-2017-trainval-480p.zip (got SRC='$(SRC)')"; \
	  echo "from https://davischallenge.org/davis2017/code.html (no need to unzip it)."; \
	  exit 1; fi
	$(call run_pack,$(DAVIS_FRAMES) "$(DATA)/davis17-train$(SUFFIX)" --clips --clip-list davis17-train $(PACK_MODE) $(SIZE_ARG) $(PACK_ARGS))
	$(PY) scripts/check_clips.py "$(DATA)/davis17-train$(SUFFIX)" davis17-train
	$(call run_pack,$(DAVIS_FRAMES) "$(DATA)/davis17-val$(SUFFIX)" --clips --clip-list davis17-val $(PACK_MODE) $(SIZE_ARG) $(PACK_ARGS))
	$(PY) scripts/check_clips.py "$(DATA)/davis17-val$(SUFFIX)" davis17-val
	@echo "Use it: export MIXSHARD_DATA=$(abspath $(DATA))"

clean:
	rm -rf demo bench-out .pytest_cache .ruff_cache
