# bash completion for cubemem (installed as
# share/bash-completion/completions/cubemem)
_cubemem() {
  local cur prev cmd
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  cmd=${COMP_WORDS[1]:-}
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "replay fit plan check-config toml2json demo help --help --version" -- "$cur"))
    return
  fi
  if [[ $cmd == help ]]; then
    [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "replay fit plan check-config toml2json demo" -- "$cur"))
    return
  fi
  case $prev in
    --pools) COMPREPLY=($(compgen -W "default subslices exclusive-pages pytorch pytorch-expandable sliced: exclusive: direct arena:" -- "$cur")); return ;;
    --persistent-memory) COMPREPLY=($(compgen -W "enabled size-match disabled enforced" -- "$cur")); return ;;
    --device) COMPREPLY=($(compgen -W "sim cuda cuda:sync cuda:async vulkan vulkan:0" -- "$cur")); return ;;
    --snapshot-free-on) COMPREPLY=($(compgen -W "completed requested" -- "$cur")); return ;;
    --snapshot-start) COMPREPLY=($(compgen -W "empty state" -- "$cur")); return ;;
    --device-memory) COMPREPLY=($(compgen -W "80GiB 40GiB 24GiB 16GiB" -- "$cur")); return ;;
    --alignment) COMPREPLY=($(compgen -W "256 512 1024" -- "$cur")); return ;;
    --config) COMPREPLY=($(compgen -f -X '!*.toml' -- "$cur") $(compgen -d -- "$cur")); return ;;
    --driver-costs) COMPREPLY=($(compgen -W "a100 fast" -- "$cur") $(compgen -f -X '!*.toml' -- "$cur")); return ;;
    --grid) COMPREPLY=($(compgen -W "2MiB 4MiB 64MiB" -- "$cur")); return ;;
    --torch-conf) COMPREPLY=($(compgen -W "expandable_segments:True max_split_size_mb: roundup_power2_divisions: max_non_split_rounding_mb: garbage_collection_threshold:" -- "$cur")); return ;;
    --svg|--html) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --repeat|--runs|--confirm) COMPREPLY=(); return ;; # a count: no file names
    --snapshot-device) COMPREPLY=($(compgen -W "0 1 2 3 4 5 6 7" -- "$cur")); return ;;
  esac
  local opts
  case $cmd in
    replay) opts="--device-memory --alignment --pools --config --no-config --persistent-memory --repeat --runs --driver-costs --json --svg --html --fit --relocate --copy-bandwidth --skip-bad-lines --device --snapshot-device --snapshot-free-on --snapshot-start --merge-streams --torch-conf --no-progress --help" ;;
    fit) opts="--pools --gpus --reserve --device-memory --alignment --persistent-memory --config --no-config --merge-streams --snapshot-device --snapshot-free-on --grid --confirm --driver-costs --torch-conf --relocate --json --skip-bad-lines --no-progress --help" ;;
    plan) opts="--device-memory --alignment --pools --config --no-config --snapshot-device --snapshot-free-on --driver-costs --skip-bad-lines --help" ;;
    check-config) opts="--lenient --help" ;;
    *) opts="--help" ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o filenames -F _cubemem cubemem
