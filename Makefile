# cubemem - top-level entry points. CMake + Ninja do the work in build/.
PREFIX ?= /usr/local
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TRACE ?= examples/torch-cpu-gpt-train.csv

.PHONY: all deps build test run install clean asan tsan valgrind fuzz bench format

all: build

# Install the build tools on first use when they are missing (Debian).
deps:
	@command -v cmake >/dev/null && command -v ninja >/dev/null && command -v cc >/dev/null \
	  || bash tools/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

run: build
	$(BUILD)/cubemem replay $(TRACE)

install: $(BUILD)/build.ninja
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD)

asan:
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCM_SANITIZE="address;undefined"
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

tsan:
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCM_SANITIZE=thread
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && ctest --output-on-failure -L 'stress|unit' -j $(JOBS)

valgrind: build
	cd $(BUILD) && ctest --output-on-failure -L unit -j $(JOBS) -T memcheck --overwrite MemoryCheckCommand=$$(command -v valgrind) --overwrite MemoryCheckCommandOptions="--leak-check=full --error-exitcode=1"

fuzz:
	bash fuzz/run.sh

# Every benchmark number in one command: bench/results/replay.md (ratios, device
# calls, ns/op per trace and layout), fit.md (smallest device against PyTorch),
# objects.md (object size against fit and driver calls), floor.md (the fewest
# driver calls possible), adaptive.md (the Adaptive preset against SubSlices),
# callgrind.md (instructions per replay operation on
# cpu/torch-cpu-mobilenet-train) and torch.md (the PyTorch layouts against
# torchsim and PyTorch's recorded totals).
bench: build
	bash bench/replay
	bash bench/adaptive
	bash bench/fit $(BUILD) > bench/results/fit.md
	bash bench/objects $(BUILD) > bench/results/objects.md
	bash bench/floor > bench/results/floor.md
	bash bench/callgrind-report.sh $(BUILD) > bench/results/callgrind.md
	bash bench/torch_validate $(BUILD) > bench/results/torch.md

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
