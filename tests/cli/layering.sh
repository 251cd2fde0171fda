# The folders of the library form layers, listed bottom-up in the Makefile's
# LAYERS (core io autograd nn data optim models generation checkpoint dist explorer
# trainer): a file may include headers of its own folder and of folders below
# it, never above, so the library can be read bottom-up one folder at a time.
# Programs (examples/, bench/, tests/, fuzz/) sit on top and may include any.
source "$(dirname "$0")/lib.bash"
cd "$QKV_SRC"
read -r -a layers <<< "$(sed -n 's/^LAYERS *:= *//p' Makefile)"
[ "${#layers[@]}" -ge 5 ] || fail "no LAYERS line in the Makefile"
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done
bad=0
for dir in "${layers[@]}"; do
  [ -d "$dir" ] || fail "LAYERS names $dir, which is not a folder"
  for f in "$dir"/*.h "$dir"/*.cpp; do
    [ -e "$f" ] || continue
    while IFS= read -r inc; do
      top=${inc%%/*}
      [ -n "${rank[$top]+x}" ] || { echo "$f includes \"$inc\": $top is not a library folder"; bad=1; continue; }
      if [ "${rank[$top]}" -gt "${rank[$dir]}" ]; then
        echo "$f includes \"$inc\": $top/ is above $dir/ in LAYERS (${layers[*]})"
        bad=1
      fi
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
  done
done
# Every folder that holds library sources is a layer (a new folder is added to LAYERS).
for d in */; do
  d=${d%/}
  case " ${layers[*]} examples bench tests fuzz tools docs datasets build " in *" $d "*) continue ;; esac
  ls "$d"/*.cpp >/dev/null 2>&1 && { echo "$d/ holds .cpp files but is not in LAYERS"; bad=1; }
done
[ $bad -eq 0 ] || fail "includes point up the layers (above)"
echo "${#layers[@]} layers, every include points down"
